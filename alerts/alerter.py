"""`Alerter`: opens and resolves incidents in the shared store and delivers what the channels are owed.

Delivery never fails the caller: each owed message is tried a few times at once (a refused connection or
a 500 is often passing), then left owed, logged in one line, for the next `deliver()` (the next sensor
tick, the next `commops sync`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from alerts.channels import Channel, DeliveryFailed, configured_channels
from alerts.incidents import IncidentStore, incident_location
from alerts.messages import Alert, one_line
from alerts.settings import AlertSettings, load_alert_settings

log = logging.getLogger("commops.alerts")

ATTEMPTS_AT_ONCE = 3
BACKOFF_SECONDS = (0.5, 2.0)  # between the attempts at once


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Alerter:
    def __init__(self, store: IncidentStore, settings: AlertSettings, channels: list[Channel] | None = None,
                 backoff: tuple[float, ...] = BACKOFF_SECONDS) -> None:
        self.store = store
        self.settings = settings
        self.channels = {channel.name: channel for channel in
                         (channels if channels is not None else configured_channels(settings))}
        self._backoff = backoff

    def alert(self, key: str, kind: str, org: str, subject: str, cause: str, run_id: str | None = None) -> bool:
        """Open incident `key` (and alert on every channel) unless it is open already."""
        alert = Alert(key, kind, org, subject, one_line(cause), now_iso(), run_id, self.settings.run_url(run_id))
        opened = self.store.open(alert, list(self.channels))
        if opened:
            log.debug(f"alert: {alert.line()}")
        return opened

    def recover(self, key: str, org: str, subject: str, cause: str, run_id: str | None = None) -> bool:
        """Resolve incident `key` if open, with a recovery notice on every channel."""
        recovery = Alert(key, "recovered", org, subject, one_line(cause), now_iso(), run_id,
                         self.settings.run_url(run_id), resolved=True)
        resolved = self.store.resolve(key, recovery, list(self.channels))
        if resolved:
            log.debug(f"recovered: {recovery.line()}")
        return resolved

    def deliver(self) -> tuple[int, int]:
        """Send what is owed to the configured channels; (delivered, still owed). Never raises for a channel.

        A channel that failed every attempt at once is not tried again in this call: its other messages stay
        owed, untried, for the next one. Each message to a dead channel cost its attempts and their backoff
        (a hanging one, their timeouts too), so a few owed messages outlasted a sensor's tick and the claim."""
        delivered = owed = 0
        down: set[str] = set()
        for item in self.store.claim_owed():
            channel = self.channels.get(item.channel)
            if channel is None:  # a channel no longer configured: leave it owed, it may come back
                self.store.failed(item.seq, f"channel {item.channel} is not configured here")
                owed += 1
                continue
            if item.channel in down:
                self.store.release(item.seq)
                owed += 1
                continue
            error = self._send(channel, item.alert, f"commops-alert-{item.seq}")
            if error is None:
                self.store.delivered(item.seq)
                delivered += 1
            else:
                self.store.failed(item.seq, error)
                down.add(item.channel)
                owed += 1
                log.warning(f"alert not delivered yet ({error}); it is tried again on the next check: "
                            f"{item.alert.state} {item.alert.incident}")
        return delivered, owed

    def _send(self, channel: Channel, alert: Alert, message_id: str) -> str | None:
        error = None
        for attempt in range(ATTEMPTS_AT_ONCE):
            try:
                channel.send(alert, message_id)
                return None
            except DeliveryFailed as failed:
                error = str(failed)
            except Exception as unexpected:  # a channel's own bug must not fail the run either
                error = f"{channel.name}: {type(unexpected).__name__}: {one_line(str(unexpected))}"
            if attempt < len(self._backoff):
                time.sleep(self._backoff[attempt])
        return error


@contextmanager
def opened_alerter(inbox: str | Path) -> Iterator[Alerter]:
    """The alerter of the inbox at `inbox` (its store beside it, or in its Postgres database), channels
    from the environment. SettingsError for a half-configured channel; InboxUnreachable for the store."""
    settings = load_alert_settings()
    store = IncidentStore(incident_location(inbox))
    try:
        yield Alerter(store, settings)
    finally:
        store.close()
