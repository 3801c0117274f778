"""The inbox: every webhook event the receiver acknowledged, in one SQLite file.

The receiver writes it while Dagster (the sensor and the incremental job) reads and
marks it from other processes. SQLite in WAL mode lets readers run beside one writer
and lets several processes write in turn; `synchronous=FULL` makes a commit durable
(the WAL is fsynced) before the receiver answers 2xx. Every connection sets WAL,
FULL and a busy timeout, and every transaction is short.

    with Inbox(data_dir / "inbox" / "webhooks.db") as inbox:
        batch = inbox.pending(limit=500)                # ready events, oldest first
        inbox.mark_applied([e.id for e in batch], applied_at)

An event is identified by its envelope `id` (`wh_evt_...`, the same on every retry and
redelivery): a second delivery of an id is acknowledged and not stored again.

An event's life: pending (not applied, not quarantined) until applied. A failed application
(`mark_failed`) raises `attempts` and holds the event back for a while (`retry_after`: 30 s,
2 min, 8 min, 32 min, at most an hour); at `max_attempts` failures, or at once for an event
that can never be applied (`quarantine`), it is quarantined: set aside with its error, so the
events behind it go on. `retry` puts events back. Only this class knows the store: the API is
what another store (e.g. Postgres) would offer.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from commops_spec.constants import EVENTS
from commops_spec.timestamps import format_timestamp, utc_now
from webhook_receiver.envelope import Envelope, parse_envelope

BUSY_TIMEOUT_MS = 30_000
INBOX_FILE = Path("inbox") / "webhooks.db"  # under the data directory (COMMOPS_DATA_DIR)
DEFAULT_MAX_ATTEMPTS = 5  # failed applications before an event is quarantined (COMMOPS_EVENTS_MAX_ATTEMPTS)
FIRST_RETRY_DELAY = timedelta(seconds=30)
RETRY_DELAY_FACTOR = 4  # 30 s, 2 min, 8 min, 32 min: an API outage of minutes quarantines nothing
MAX_RETRY_DELAY = timedelta(hours=1)
_KNOWN_EVENTS = frozenset(EVENTS)
_CHUNK = 500  # ids per IN (...) list

_TABLE = """
CREATE TABLE IF NOT EXISTS events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
    event           TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    organization_id TEXT,
    received_at     TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    known_event     INTEGER NOT NULL,
    applied_at      TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT
)
"""
# Columns added after the first schema: added in place to inbox files made before them.
_ADDED_COLUMNS = {
    "quarantined_at": "TEXT",  # set aside (never applied until retried)
    "retry_after": "TEXT",  # not taken again before this time (after a failed application)
    "failed_by": "TEXT",  # the run whose failure was counted last: one attempt per run
}
_OPEN_INDEX = "CREATE INDEX IF NOT EXISTS events_open ON events (seq) WHERE applied_at IS NULL AND quarantined_at IS NULL"
_OPEN = "applied_at IS NULL AND quarantined_at IS NULL"

_COLUMNS = (
    "seq, id, event, created_at, organization_id, received_at, payload, known_event, applied_at, attempts, "
    "last_error, quarantined_at, retry_after"
)


def inbox_path(data_dir: str | Path) -> Path:
    """The inbox of a data directory: the one place its location is defined (receiver and pipeline)."""
    return Path(data_dir).expanduser().resolve() / INBOX_FILE


def retry_delay(attempts: int) -> timedelta:
    """How long an event that failed `attempts` times waits before it is taken again."""
    return min(FIRST_RETRY_DELAY * RETRY_DELAY_FACTOR ** max(attempts - 1, 0), MAX_RETRY_DELAY)


@dataclass(frozen=True)
class InboxEvent:
    """One stored event. `payload` is the request body exactly as received (the signed bytes)."""

    seq: int  # order of first receipt
    id: str  # the envelope id, wh_evt_...
    event: str  # event name, e.g. kol.updated
    created_at: str  # the envelope's created_at, as sent
    organization_id: str | None
    received_at: str  # when the receiver committed it (commops_spec.timestamps form)
    payload: bytes
    known_event: bool  # False: an event name outside part 6 of the spec (stored, flagged)
    applied_at: str | None  # None while pending
    attempts: int  # failed applications so far
    last_error: str | None
    quarantined_at: str | None = None  # set aside: not taken until `retry`
    retry_after: str | None = None  # after a failure: not taken before this time

    def envelope(self) -> Envelope:
        """The parsed payload; InvalidEnvelope when it can never be an event (stored by an older receiver)."""
        return parse_envelope(self.payload)

    @classmethod
    def _from_row(cls, row: sqlite3.Row | tuple) -> InboxEvent:
        seq, id_, event, created_at, org, received_at, payload, known, *rest = row
        return cls(seq, id_, event, created_at, org, received_at, bytes(payload), bool(known), *rest)


class Inbox:
    """The inbox at `path` (created with its schema when missing, brought up to date when older).

    One Inbox object may be shared by threads: each thread gets its own connection.
    Any number of processes may open the same file. `with Inbox(...) as inbox:` closes this
    thread's connection at the end.
    """

    def __init__(self, path: str | Path, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.path = Path(path)
        self.max_attempts = max_attempts
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._ensure_schema()

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------ writing

    def add(self, raw: bytes, envelope: Envelope) -> bool:
        """Store one event and commit it durably. False when its id was already stored."""
        return self.add_many([(raw, envelope)])[0]

    def add_many(self, items: Sequence[tuple[bytes, Envelope]]) -> list[bool]:
        """Store several events in one durable commit (the receiver's group commit).

        Returns, per item, True when it was new and False when its id was already stored
        (earlier, or earlier in `items`).
        """
        received_at = utc_now()
        rows = [
            (e.id, e.event, e.created_at_text, e.organization_id, received_at, raw, e.event in _KNOWN_EVENTS)
            for raw, e in items
        ]
        added = []
        with self._transaction() as conn:
            for row in rows:
                cursor = conn.execute(
                    "INSERT INTO events (id, event, created_at, organization_id, received_at, payload, known_event)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    row,
                )
                added.append(cursor.rowcount == 1)
        return added

    def mark_applied(self, ids: Iterable[str], applied_at: str | None = None) -> int:
        """Mark events applied (no longer pending); returns how many rows changed.

        `applied_at` defaults to now; events already applied keep their first time.
        """
        stamp = applied_at or utc_now()
        with self._transaction() as conn:
            return sum(
                conn.execute(
                    "UPDATE events SET applied_at = ?, quarantined_at = NULL, retry_after = NULL"
                    " WHERE id = ? AND applied_at IS NULL",
                    (stamp, i),
                ).rowcount
                for i in ids
            )

    def mark_failed(self, ids: Iterable[str], error: str, *, run_id: str | None = None) -> list[str]:
        """Record a failed application of pending events: `attempts` + 1, `last_error`, and a wait
        before the next attempt (`retry_delay`); an event reaching `max_attempts` is quarantined.

        `run_id` counts one failure per run however many steps report it (a step's hook, then the
        run's failure sensor). Returns the ids this call quarantined.
        """
        now = datetime.now(UTC)
        quarantined: list[str] = []
        with self._transaction() as conn:
            for event_id in ids:
                row = conn.execute(f"SELECT attempts, failed_by FROM events WHERE id = ? AND {_OPEN}", (event_id,)).fetchone()
                if row is None or (run_id is not None and row[1] == run_id):
                    continue
                attempts = row[0] + 1
                if attempts >= self.max_attempts:
                    quarantined_at, retry_after = format_timestamp(now), None
                    quarantined.append(event_id)
                else:
                    quarantined_at, retry_after = None, format_timestamp(now + retry_delay(attempts))
                conn.execute(
                    "UPDATE events SET attempts = ?, last_error = ?, failed_by = ?, quarantined_at = ?, retry_after = ?"
                    " WHERE id = ?",
                    (attempts, error, run_id, quarantined_at, retry_after, event_id),
                )
        return quarantined

    def quarantine(self, ids: Iterable[str], error: str) -> int:
        """Set pending events aside at once (they can never be applied): attempts + 1, `last_error`."""
        stamp = utc_now()
        with self._transaction() as conn:
            return sum(
                conn.execute(
                    "UPDATE events SET attempts = attempts + 1, last_error = ?, quarantined_at = ?, retry_after = NULL"
                    f" WHERE id = ? AND {_OPEN}",
                    (error, stamp, i),
                ).rowcount
                for i in ids
            )

    def retry(self, ids: Iterable[str] | None = None) -> list[str]:
        """Put quarantined or failing events back to pending now (`ids`; None: every one of them):
        attempts reset, no wait; `last_error` is kept for history. Returns the ids put back."""
        unsettled = "applied_at IS NULL AND (quarantined_at IS NOT NULL OR attempts > 0)"
        with self._transaction() as conn:
            if ids is None:
                chosen = [row[0] for row in conn.execute(f"SELECT id FROM events WHERE {unsettled} ORDER BY seq")]
            else:
                wanted = list(dict.fromkeys(ids))
                chosen = [
                    row[0] for chunk in _chunks(wanted)
                    for row in conn.execute(f"SELECT id FROM events WHERE {unsettled} AND id IN ({_marks(chunk)})", chunk)
                ]
            for event_id in chosen:
                conn.execute(
                    "UPDATE events SET quarantined_at = NULL, retry_after = NULL, attempts = 0, failed_by = NULL"
                    " WHERE id = ?",
                    (event_id,),
                )
        return chosen

    # ------------------------------------------------------------ reading

    def pending(self, limit: int | None = None) -> list[InboxEvent]:
        """Events ready to apply: not applied, not quarantined, not waiting after a failure; oldest
        receipt first (by `seq`), at most `limit`."""
        sql = (
            f"SELECT {_COLUMNS} FROM events WHERE {_OPEN} AND (retry_after IS NULL OR retry_after <= ?) ORDER BY seq"
        )
        params: tuple = (utc_now(),)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        return [InboxEvent._from_row(row) for row in self._conn().execute(sql, params).fetchall()]

    def quarantined(self, limit: int | None = None) -> list[InboxEvent]:
        """Quarantined events, oldest receipt first, at most `limit`."""
        return self._select("quarantined_at IS NOT NULL AND applied_at IS NULL", limit)

    def failing(self, limit: int | None = None) -> list[InboxEvent]:
        """Pending events that failed at least once (waiting or ready to be tried again), oldest first."""
        return self._select(f"{_OPEN} AND attempts > 0", limit)

    def get(self, ids: Iterable[str]) -> list[InboxEvent]:
        """The stored events among `ids`, by `seq`; unknown ids are left out."""
        conn = self._conn()
        found = [
            InboxEvent._from_row(row)
            for chunk in _chunks(list(dict.fromkeys(ids)))
            for row in conn.execute(f"SELECT {_COLUMNS} FROM events WHERE id IN ({_marks(chunk)})", chunk).fetchall()
        ]
        return sorted(found, key=lambda e: e.seq)

    def counts(self) -> dict[str, int]:
        """{"total", "pending" (not applied, not quarantined), "backing_off" (pending, waiting after a
        failure), "failing" (pending with attempts > 0), "quarantined", "applied", "unknown_event"}."""
        row = self._conn().execute(
            "SELECT count(*),"
            f" coalesce(sum({_OPEN}), 0),"
            f" coalesce(sum({_OPEN} AND retry_after > ?), 0),"
            f" coalesce(sum({_OPEN} AND attempts > 0), 0),"
            " coalesce(sum(applied_at IS NULL AND quarantined_at IS NOT NULL), 0),"
            " coalesce(sum(applied_at IS NOT NULL), 0),"
            " coalesce(sum(NOT known_event), 0)"
            " FROM events",
            (utc_now(),),
        ).fetchone()
        names = ("total", "pending", "backing_off", "failing", "quarantined", "applied", "unknown_event")
        return dict(zip(names, row, strict=True))

    def close(self) -> None:
        """Close this thread's connection (others close when their thread's Inbox is collected)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # ------------------------------------------------------------ store

    def _select(self, where: str, limit: int | None) -> list[InboxEvent]:
        sql = f"SELECT {_COLUMNS} FROM events WHERE {where} ORDER BY seq"
        params: tuple = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        return [InboxEvent._from_row(row) for row in self._conn().execute(sql, params).fetchall()]

    def _ensure_schema(self) -> None:
        """Create the table, or add the columns and index an older inbox file lacks (in place, once,
        under the write lock, so processes opening the same file at once agree)."""
        conn = self._conn()
        if self._schema_current(conn):
            return
        with self._transaction() as conn:
            conn.execute(_TABLE)
            present = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
            for name, type_ in _ADDED_COLUMNS.items():
                if name not in present:
                    conn.execute(f"ALTER TABLE events ADD COLUMN {name} {type_}")
            conn.execute("DROP INDEX IF EXISTS events_pending")  # the first schema's (applied_at IS NULL only)
            conn.execute(_OPEN_INDEX)

    @staticmethod
    def _schema_current(conn: sqlite3.Connection) -> bool:
        present = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
        indexed = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'events_open'").fetchone()
        return bool(present) and set(_ADDED_COLUMNS) <= present and indexed is not None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
        return conn

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn())


def _chunks(ids: list[str]) -> Iterable[list[str]]:
    return (ids[start : start + _CHUNK] for start in range(0, len(ids), _CHUNK))


def _marks(chunk: list[str]) -> str:
    return ",".join("?" * len(chunk))


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection with the inbox's pragmas: WAL, synchronous=FULL, busy timeout; autocommit mode."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (or ROLLBACK on error): takes the write lock up front."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
