"""The inbox: every webhook event the receiver acknowledged, in one SQLite file.

The receiver writes it while Dagster (the sensor and the incremental job) reads and
marks it from other processes. SQLite in WAL mode lets readers run beside one writer
and lets several processes write in turn; `synchronous=FULL` makes a commit durable
(the WAL is fsynced) before the receiver answers 2xx. Every connection sets WAL,
FULL and a busy timeout, and every transaction is short.

    inbox = Inbox(data_dir / "inbox" / "webhooks.db")
    for event in inbox.pending(limit=500):          # oldest first
        apply(event.envelope())
    inbox.mark_applied([e.id for e in events], applied_at)

An event is identified by its envelope `id` (`wh_evt_...`, the same on every retry and
redelivery): a second delivery of an id is acknowledged and not stored again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from commops_spec.constants import EVENTS

BUSY_TIMEOUT_MS = 30_000
INBOX_FILE = Path("inbox") / "webhooks.db"  # under the data directory (COMMOPS_DATA_DIR)
_KNOWN_EVENTS = frozenset(EVENTS)

_SCHEMA = """
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
);
CREATE INDEX IF NOT EXISTS events_pending ON events (seq) WHERE applied_at IS NULL;
"""

_COLUMNS = (
    "seq, id, event, created_at, organization_id, received_at, payload, known_event, applied_at, attempts, last_error"
)


def inbox_path(data_dir: str | Path) -> Path:
    """The inbox of a data directory: the one place its location is defined (receiver and pipeline)."""
    return Path(data_dir).expanduser().resolve() / INBOX_FILE


def utc_now() -> str:
    """The inbox's timestamp format: ISO 8601 UTC with microseconds and `Z`."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class InboxEvent:
    """One stored event. `payload` is the request body exactly as received (the signed bytes)."""

    seq: int  # order of first receipt
    id: str  # the envelope id, wh_evt_...
    event: str  # event name, e.g. kol.updated
    created_at: str  # the envelope's created_at, as sent
    organization_id: str | None
    received_at: str  # when the receiver committed it (utc_now format)
    payload: bytes
    known_event: bool  # False: an event name outside part 6 of the spec (stored, flagged)
    applied_at: str | None  # None while pending
    attempts: int  # failed applications so far
    last_error: str | None

    def envelope(self) -> dict[str, Any]:
        """The parsed payload: {id, event, created_at, data, organization_id}."""
        return json.loads(self.payload)

    @classmethod
    def _from_row(cls, row: sqlite3.Row | tuple) -> InboxEvent:
        seq, id_, event, created_at, org, received_at, payload, known, applied_at, attempts, last_error = row
        return cls(seq, id_, event, created_at, org, received_at, bytes(payload), bool(known), applied_at,
                   attempts, last_error)


class Inbox:
    """The inbox at `path` (created with its schema when missing).

    One Inbox object may be shared by threads: each thread gets its own connection.
    Any number of processes may open the same file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._conn().executescript(_SCHEMA)  # idempotent; each statement commits on its own

    # ------------------------------------------------------------ writing

    def add(self, raw: bytes, envelope: dict[str, Any]) -> bool:
        """Store one event and commit it durably. False when its id was already stored."""
        return self.add_many([(raw, envelope)])[0]

    def add_many(self, items: Sequence[tuple[bytes, dict[str, Any]]]) -> list[bool]:
        """Store several events in one durable commit (the receiver's group commit).

        Returns, per item, True when it was new and False when its id was already stored
        (earlier, or earlier in `items`).
        """
        received_at = utc_now()
        rows = [
            (
                envelope["id"],
                envelope["event"],
                envelope["created_at"],
                envelope.get("organization_id"),
                received_at,
                raw,
                envelope["event"] in _KNOWN_EVENTS,
            )
            for raw, envelope in items
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
                conn.execute("UPDATE events SET applied_at = ? WHERE id = ? AND applied_at IS NULL", (stamp, i)).rowcount
                for i in ids
            )

    def mark_failed(self, ids: Iterable[str], error: str) -> int:
        """Record a failed application: events stay pending, `attempts` + 1, `last_error` set."""
        with self._transaction() as conn:
            return sum(
                conn.execute(
                    "UPDATE events SET attempts = attempts + 1, last_error = ? WHERE id = ? AND applied_at IS NULL",
                    (error, i),
                ).rowcount
                for i in ids
            )

    # ------------------------------------------------------------ reading

    def pending(self, limit: int | None = None) -> list[InboxEvent]:
        """Events not yet applied, oldest receipt first (by `seq`), at most `limit`."""
        sql = f"SELECT {_COLUMNS} FROM events WHERE applied_at IS NULL ORDER BY seq"
        params: tuple = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        return [InboxEvent._from_row(row) for row in self._conn().execute(sql, params).fetchall()]

    def get(self, ids: Iterable[str]) -> list[InboxEvent]:
        """The stored events among `ids`, by `seq`; unknown ids are left out."""
        wanted = list(dict.fromkeys(ids))
        found: list[InboxEvent] = []
        conn = self._conn()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(f"SELECT {_COLUMNS} FROM events WHERE id IN ({marks})", chunk).fetchall()
            found.extend(InboxEvent._from_row(row) for row in rows)
        return sorted(found, key=lambda e: e.seq)

    def counts(self) -> dict[str, int]:
        """{"total", "pending", "applied", "failing" (pending with attempts > 0), "unknown_event"}."""
        row = self._conn().execute(
            "SELECT count(*),"
            " coalesce(sum(applied_at IS NULL), 0),"
            " coalesce(sum(applied_at IS NOT NULL), 0),"
            " coalesce(sum(applied_at IS NULL AND attempts > 0), 0),"
            " coalesce(sum(NOT known_event), 0)"
            " FROM events"
        ).fetchone()
        return dict(zip(("total", "pending", "applied", "failing", "unknown_event"), row, strict=True))

    def close(self) -> None:
        """Close this thread's connection (others close when their thread's Inbox is collected)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # ------------------------------------------------------------ connections

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
        return conn

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn())


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
