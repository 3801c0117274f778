"""The "receiver looks dead" alert (`receiver/<org>`): an organization's newest inbox event was received
more than COMMOPS_ALERT_RECEIVER_SILENCE_MINUTES ago, while the API shows KOLs changed after it that had
time to arrive. Resolved when events arrive again.

The spec offers no `updated_since` filter; the API is asked for its most recently updated KOLs
(`GET /v1/kols?sort=updated_at&order=desc&per_page=100`, one request). A change counts as missed once it
is more than the delivery grace (2 minutes, at most the silence setting) after the newest event and
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
PAGE = 100
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class NotAsked(RuntimeError):
    """The API could not be asked (one line, no key)."""


@dataclass(frozen=True)
class RecentChanges:
    updated: list[datetime]  # the most recently updated KOLs' updated_at, newest first
    api_now: datetime  # the API's clock when it answered
    full_page: bool  # more changes may lie beyond these


def recent_kol_changes(org: Org) -> RecentChanges:
    url = f"{org.base_url.rstrip('/')}/kols"
    try:
        key = org.api_key()
        response = httpx.get(url, params={"sort": "updated_at", "order": "desc", "per_page": PAGE},
                             headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT, trust_env=False)
    except SettingsError as error:
        raise NotAsked(str(error)) from None
    except httpx.HTTPError as error:
        raise NotAsked(f"GET {url}: {type(error).__name__}") from None
    if response.status_code != 200:
        raise NotAsked(f"GET {url} answered {response.status_code}")
    try:
        items = response.json()["data"]
        updated = [parse_timestamp(item["updated_at"]) for item in items]
    except (ValueError, KeyError, TypeError, UnreadableTimestamp) as error:
        raise NotAsked(f"GET {url}: no updated_at to compare ({type(error).__name__})") from None
    try:
        api_now = parsedate_to_datetime(response.headers["date"]).astimezone(UTC)
    except (KeyError, TypeError, ValueError):
        api_now = datetime.now(UTC)
    return RecentChanges(updated, api_now, len(items) >= PAGE)


def first_missed(changes: RecentChanges, newest_event: datetime, grace: timedelta) -> datetime | None:
    """The earliest change seen that the receiver should have had by now, if any."""
    after = [moment for moment in changes.updated if moment > newest_event + grace]
    due = [moment for moment in after if moment <= changes.api_now - grace]
    if due:
        return min(due)
    if after and changes.full_page and len(after) == len(changes.updated):
        return min(after)  # a whole page of changes since, none delivered: not one delivery under way
    return None


def review_receiver(org: Org, newest_event: datetime | None, alerter: Alerter, now: datetime) -> None:
    if newest_event is None:
        return
    silence = timedelta(minutes=alerter.settings.receiver_silence_minutes)
    key = f"receiver/{org.name}"
    received = newest_event.strftime("%Y-%m-%d %H:%M UTC")
    if now - newest_event <= silence:
        alerter.recover(key, org.name, "receiver", f"webhook events arrive again (newest received {received})")
        return
    try:
        changes = recent_kol_changes(org)
    except NotAsked as error:
        log.warning(f"receiver of {org.name} not judged: {error}")
        return
    missed = first_missed(changes, newest_event, min(DELIVERY_GRACE, silence))
    if missed is not None:
        minutes = (now - newest_event).total_seconds() / 60
        alerter.alert(key, "receiver_silent", org.name, "receiver",
                      f"no webhook event received for {minutes:.0f} min (newest {received}) while the API shows "
                      f"KOLs updated since (first {missed.strftime('%Y-%m-%d %H:%M UTC')}): is commops receiver "
                      f"running and its webhook enabled? (COMMOPS_ALERT_RECEIVER_SILENCE_MINUTES="
                      f"{alerter.settings.receiver_silence_minutes:g})")
