"""The incident store: which incidents are open, and the outbox of messages owed to each channel.

One store for every process that alerts (the daemon's sensors, `commops sync` and `commops status` under
cron): a SQLite file beside the inbox ($COMMOPS_DATA_DIR/inbox/alerts.db), or, when COMMOPS_INBOX_URL
names a Postgres database, two tables of that database (resources/inbox/stores.py keeps what differs).

An incident is keyed by what it is about (`run/nightly_sync/acme`, `stale/acme/kols`, ...). Opening an
incident that is already open does nothing, so a sensor tick or a second process that sees the same
failure does not alert again; resolving an open one queues a recovery notice. Each message is queued once
per channel in the same transaction, and stays owed until a delivery succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from alerts.messages import Alert
from resources.inbox.stores import PostgresStore, SqliteStore, is_postgres_url

ALERTS_FILE = "alerts.db"  # beside the SQLite inbox
CLAIM_SECONDS = 120  # a delivery being tried is held this long from other processes
_SCHEMA_LOCK = 7_264_002

_INCIDENTS = (
    "CREATE TABLE IF NOT EXISTS commops_alert_incidents (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
    "org TEXT NOT NULL, subject TEXT NOT NULL, cause TEXT NOT NULL, opened_at TEXT NOT NULL, run_id TEXT, "
    "resolved_at TEXT)"
)
_OUTBOX = (
    "CREATE TABLE IF NOT EXISTS commops_alert_outbox (seq {seq}, channel TEXT NOT NULL, message TEXT NOT NULL, "
    "created_at TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT, delivered_at TEXT, "
    "claimed_until TEXT)"
)
_OWED_INDEX = "CREATE INDEX IF NOT EXISTS commops_alert_outbox_owed ON commops_alert_outbox (seq) WHERE delivered_at IS NULL"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Owed:
    seq: int
    channel: str
    alert: Alert
    attempts: int


class _SqliteIncidents(SqliteStore):
    def _ensure_schema(self) -> None:
        with self.transaction() as cursor:
            cursor.execute(_INCIDENTS)
            cursor.execute(_OUTBOX.format(seq="INTEGER PRIMARY KEY AUTOINCREMENT"))
            cursor.execute(_OWED_INDEX)


class _PostgresIncidents(PostgresStore):
    def _ensure_schema(self) -> None:
        with self.transaction() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
            cursor.execute(_INCIDENTS)
            cursor.execute(_OUTBOX.format(seq="BIGSERIAL PRIMARY KEY"))
            cursor.execute(_OWED_INDEX)


def incident_location(inbox: str | Path) -> str | Path:
    """Where the incidents of the inbox at `inbox` are kept: its Postgres database, or a file beside it."""
    return inbox if is_postgres_url(inbox) else Path(inbox).parent / ALERTS_FILE


class IncidentStore:
    def __init__(self, location: str | Path) -> None:
        self._store = _PostgresIncidents(str(location)) if is_postgres_url(location) else _SqliteIncidents(location)
        self.where = self._store.where

    def close(self) -> None:
        self._store.close()

    def open(self, alert: Alert, channels: list[str]) -> bool:
        """Open the incident `alert.incident` and owe `alert` to each channel; False (nothing owed) when it
        is open already."""
        with self._store.transaction() as cursor:
            opened = cursor.execute(
                "INSERT INTO commops_alert_incidents (key, kind, org, subject, cause, opened_at, run_id, resolved_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (key) DO UPDATE SET kind = excluded.kind, "
                "org = excluded.org, subject = excluded.subject, cause = excluded.cause, "
                "opened_at = excluded.opened_at, run_id = excluded.run_id, resolved_at = NULL "
                "WHERE commops_alert_incidents.resolved_at IS NOT NULL",
                (alert.incident, alert.kind, alert.org, alert.subject, alert.cause, alert.at, alert.run_id),
            ).rowcount == 1
            if opened:
                self._owe(cursor, alert, channels)
        return opened

    def resolve(self, key: str, recovery: Alert, channels: list[str]) -> bool:
        """Close the open incident `key` and owe its recovery notice; False when none is open."""
        with self._store.transaction() as cursor:
            resolved = cursor.execute(
                "UPDATE commops_alert_incidents SET resolved_at = ? WHERE key = ? AND resolved_at IS NULL",
                (recovery.at, key),
            ).rowcount == 1
            if resolved:
                self._owe(cursor, recovery, channels)
        return resolved

    def open_incidents(self, org: str | None = None) -> list[Alert]:
        rows = self._store.read(
            "SELECT key, kind, org, subject, cause, opened_at, run_id FROM commops_alert_incidents "
            "WHERE resolved_at IS NULL" + (" AND org = ?" if org else "") + " ORDER BY opened_at, key",
            (org,) if org else (),
        )
        return [Alert(*row) for row in rows]

    def is_open(self, key: str) -> bool:
        return bool(self._store.read(
            "SELECT 1 FROM commops_alert_incidents WHERE key = ? AND resolved_at IS NULL", (key,)))

    def claim_owed(self, limit: int = 100) -> list[Owed]:
        """Messages owed and held by no other process now, each claimed for CLAIM_SECONDS."""
        now = datetime.now(UTC)
        rows = self._store.read(
            "SELECT seq, channel, message, attempts FROM commops_alert_outbox WHERE delivered_at IS NULL "
            "AND (claimed_until IS NULL OR claimed_until <= ?) ORDER BY seq LIMIT ?", (now.isoformat(), limit))
        until = (now + timedelta(seconds=CLAIM_SECONDS)).isoformat()
        claimed = []
        for seq, channel, message, attempts in rows:
            with self._store.transaction() as cursor:
                taken = cursor.execute(
                    "UPDATE commops_alert_outbox SET claimed_until = ? WHERE seq = ? AND delivered_at IS NULL "
                    "AND (claimed_until IS NULL OR claimed_until <= ?)", (until, seq, now.isoformat())).rowcount
            if taken:
                claimed.append(Owed(seq, channel, Alert.from_json(message), attempts))
        return claimed

    def delivered(self, seq: int) -> None:
        with self._store.transaction() as cursor:
            cursor.execute("UPDATE commops_alert_outbox SET delivered_at = ?, claimed_until = NULL, "
                           "attempts = attempts + 1 WHERE seq = ?", (_now(), seq))

    def failed(self, seq: int, error: str) -> None:
        with self._store.transaction() as cursor:
            cursor.execute("UPDATE commops_alert_outbox SET last_error = ?, claimed_until = NULL, "
                           "attempts = attempts + 1 WHERE seq = ?", (error, seq))

    def release(self, seq: int) -> None:
        """Give a claimed message back untried: still owed, its attempts unchanged."""
        with self._store.transaction() as cursor:
            cursor.execute("UPDATE commops_alert_outbox SET claimed_until = NULL WHERE seq = ?", (seq,))

    def _owe(self, cursor, alert: Alert, channels: list[str]) -> None:
        for channel in channels:
            cursor.execute("INSERT INTO commops_alert_outbox (channel, message, created_at) VALUES (?, ?, ?)",
                           (channel, alert.to_json(), _now()))
