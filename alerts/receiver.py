"""The "receiver looks dead" alert (`receiver/<org>`): an organization's newest inbox event was received
more than COMMOPS_ALERT_RECEIVER_SILENCE_MINUTES ago, while the API shows rows added after it that had
time to arrive. Resolved when events arrive again: one is received within the setting, or none of the rows
added is newer than the newest event any more.

The spec offers no `updated_since` filter, and a KOL's `updated_at` also moves with no event (an
interaction, a publication, an attendance refresh its metrics), so the API is asked for its newest rows
of the resources whose every new row is an event: KOLs by `created_at` (`kol.created`) and signals by
`fetched_at` (`signal.new`), one request each (`sort=...&order=desc&per_page=100`). A row counts as missed
once it is more than the delivery grace (2 minutes, at most the silence setting) after the newest event and
before the API's own clock (its Date header) less that grace: a delivery under way, or clocks a little
apart, never alert. An organization whose inbox never received an event (no receiver set up for it) is
not judged; neither is one the API cannot be asked about now (one log line: a failed run alerts on that).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx

from alerts.alerter import Alerter
from commops_spec.timestamps import UnreadableTimestamp, parse_timestamp
from resources.orgs import Org
from resources.settings import SettingsError

log = logging.getLogger("commops.alerts")

DELIVERY_GRACE = timedelta(minutes=2)
WATCHED = (("kols", "created_at"), ("signals", "fetched_at"))  # each new row is an event: kol.created, signal.new
PAGE = 100
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class NotAsked(RuntimeError):
    """The API could not be asked (one line, no key)."""


@dataclass(frozen=True)
class RecentChanges:
    added: list[datetime]  # the newest rows' times, newest first
    api_now: datetime  # the API's clock when it answered
    full_page: bool  # more rows may lie beyond these


def recent_rows(org: Org, resource: str, field: str) -> RecentChanges:
    url = f"{org.base_url.rstrip('/')}/{resource}"
    try:
        key = org.api_key()
        response = httpx.get(url, params={"sort": field, "order": "desc", "per_page": PAGE},
                             headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT, trust_env=False)
    except SettingsError as error:
        raise NotAsked(str(error)) from None
    except httpx.HTTPError as error:
        raise NotAsked(f"GET {url}: {type(error).__name__}") from None
    if response.status_code != 200:
        raise NotAsked(f"GET {url} answered {response.status_code}")
    try:
        items = response.json()["data"]
        added = [parse_timestamp(item[field]) for item in items]
    except (ValueError, KeyError, TypeError, UnreadableTimestamp) as error:
        raise NotAsked(f"GET {url}: no {field} to compare ({type(error).__name__})") from None
    try:
        api_now = parsedate_to_datetime(response.headers["date"]).astimezone(UTC)
    except (KeyError, TypeError, ValueError):
        api_now = datetime.now(UTC)
    return RecentChanges(added, api_now, len(items) >= PAGE)


def first_missed(changes: RecentChanges, newest_event: datetime, grace: timedelta) -> datetime | None:
    """The earliest row seen whose event the receiver should have had by now, if any."""
    after = [moment for moment in changes.added if moment > newest_event + grace]
    due = [moment for moment in after if moment <= changes.api_now - grace]
    if due:
        return min(due)
    if after and changes.full_page and len(after) == len(changes.added):
        return min(after)  # a whole page of rows since, none delivered: not one delivery under way
    return None


def review_receiver(org: Org, newest_event: datetime | None, alerter: Alerter, now: datetime) -> None:
    if newest_event is None:
        return
    silence = timedelta(minutes=alerter.settings.receiver_silence_minutes)
    key = f"receiver/{org.name}"
    received = newest_event.strftime("%Y-%m-%d %H:%M UTC")
    arriving = f"webhook events arrive again (newest received {received})"
    if now - newest_event <= silence:
        alerter.recover(key, org.name, "receiver", arriving)
        return
    grace, missed, judged = min(DELIVERY_GRACE, silence), [], False
    for resource, field in WATCHED:
        try:
            first = first_missed(recent_rows(org, resource, field), newest_event, grace)
        except NotAsked as error:
            log.warning(f"receiver of {org.name} not judged by {resource}: {error}")
            continue
        judged = True
        if first is not None:
            missed.append((first, resource))
    if not missed:
        if judged:  # nothing added since the newest event: it came after what was missed
            alerter.recover(key, org.name, "receiver", arriving)
        return
    first, resource = min(missed)
    minutes = (now - newest_event).total_seconds() / 60
    alerter.alert(key, "receiver_silent", org.name, "receiver",
                  f"no webhook event received for {minutes:.0f} min (newest {received}) while the API shows "
                  f"{resource} added since (first {first.strftime('%Y-%m-%d %H:%M UTC')}): is commops receiver "
                  f"running and its webhook enabled? (COMMOPS_ALERT_RECEIVER_SILENCE_MINUTES="
                  f"{alerter.settings.receiver_silence_minutes:g})")
