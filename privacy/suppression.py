"""The suppression list and the erasure log, beside the inbox: in <data_dir>/inbox/privacy.db (SQLite, the
default), or, when the inbox is in Postgres (COMMOPS_INBOX_URL), in its database (tables
`commops_privacy_suppressed` and `commops_privacy_log`), so every receiver host and the sync read one list.

The list holds keyed hashes only: HMAC-SHA256 under COMMOPS_PRIVACY_KEY (from the environment, never
stored) of `kol:<id>` and of `email:<address lower-cased and trimmed>`. A sync, a detail fetch or a
webhook event whose KOL id or email hashes to a listed value is dropped before anything is written.
It fails closed: once the list holds an entry, a process without the key refuses to start.

The erasure log records each erasure (the subject's keyed hash, the OS user who ran it, when, which
stores, how many rows) and each suppression added or lifted: no personal data, kept for the DPO.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from file_modes import private_dir, private_sqlite_file
from privacy.subject import Subject, normalize_email
from resources.inbox import inbox_location
from resources.inbox.inbox import INBOX_FILE
from resources.inbox.stores import PostgresStore, is_postgres_url
from resources.postgres_urls import redacted

PRIVACY_KEY_ENV = "COMMOPS_PRIVACY_KEY"
PRIVACY_FILE = INBOX_FILE.parent / "privacy.db"
MOVED_SUFFIX = ".moved-to-postgres"  # a privacy.db whose entries were copied into the inbox's Postgres
# (SQLite's table, Postgres's table): in Postgres, names of our own in a database shared with Dagster's storage.
TABLES = {"suppressed": ("suppressed", "commops_privacy_suppressed"), "log": ("privacy_log", "commops_privacy_log")}
_SCHEMA_LOCK = 7_264_002  # pg_advisory_xact_lock key: processes creating the tables or moving a file take turns

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {suppressed} (hash TEXT PRIMARY KEY, kind TEXT NOT NULL, added_at TEXT NOT NULL, "
    "added_by TEXT NOT NULL{suppressed_seq})",
    "CREATE TABLE IF NOT EXISTS {log} (seq {log_seq}, at TEXT NOT NULL, "
    '"user" TEXT NOT NULL, action TEXT NOT NULL, subject TEXT NOT NULL, stores TEXT NOT NULL, rows INTEGER NOT NULL)',
)
_SQLITE = {"suppressed_seq": "", "log_seq": "INTEGER PRIMARY KEY AUTOINCREMENT"}
# Postgres: `seq` numbers every entry added, so a receiver sees a change in (count, max(seq)) without reading the list.
_POSTGRES = {"suppressed_seq": ", seq BIGSERIAL NOT NULL", "log_seq": "BIGSERIAL PRIMARY KEY"}
_LOG_COLUMNS = 'at, "user", action, subject, stores, rows'


class PrivacyKeyMissing(RuntimeError):
    """The suppression list holds entries and COMMOPS_PRIVACY_KEY is not set: nothing may run."""


def privacy_key(required: bool = True) -> bytes | None:
    key = os.environ.get(PRIVACY_KEY_ENV, "")
    if not key:
        if required:
            raise PrivacyKeyMissing(f"{PRIVACY_KEY_ENV} is not set: the privacy commands need the key the "
                                    "suppression list is hashed with (kept outside the data directory)")
        return None
    return key.encode()


def keyed_hash(key: bytes, kind: str, value: str) -> str:
    value = normalize_email(value) if kind == "email" else value.strip()
    return hmac.new(key, f"{kind}:{value}".encode(), hashlib.sha256).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _sql(statement: str, postgres: bool) -> str:
    return statement.format(**{name: tables[postgres] for name, tables in TABLES.items()},
                            **(_POSTGRES if postgres else _SQLITE))


_CURRENT_SCHEMAS: set[str] = set()  # Postgres databases whose privacy tables this process found (or made)


class PrivacyStore:
    """The suppression list and the log of a data directory, where its inbox is (`location`, default
    resources/inbox `inbox_location`: COMMOPS_INBOX_URL, else the data directory's file): privacy.db beside
    the SQLite inbox, or the tables beside the inbox's in Postgres.

    On Postgres, a privacy.db the data directory still holds (written before COMMOPS_INBOX_URL was set) is
    copied in on first use and renamed `privacy.db.moved-to-postgres`: its entries reach every host."""

    def __init__(self, data_dir: str | Path, location: str | Path | None = None) -> None:
        self.path = Path(data_dir) / PRIVACY_FILE
        location = inbox_location(data_dir) if location is None else location
        self.url = str(location) if is_postgres_url(location) else None
        self._postgres: PostgresStore | None = None
        self.where = str(self.path) if self.url is None else f"{redacted(self.url)} ({TABLES['suppressed'][1]})"

    @property
    def exists(self) -> bool:
        """Whether there may be a list to read (a SQLite file not created yet holds none)."""
        return self.url is not None or self.path.exists()

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        """One transaction (Postgres) or one autocommit connection (SQLite); `?` parameters, tables as `{name}`."""
        if self.url is None:
            with closing(self._connect()) as conn:
                yield _Statements(conn, postgres=False)
            return
        if self._postgres is None:
            self._postgres = PostgresStore(self.url)
            self._ensure_postgres()
        with self._postgres.transaction() as cursor:
            yield _Statements(cursor, postgres=True)

    def _connect(self) -> sqlite3.Connection:
        private_dir(self.path.parent)
        private_sqlite_file(self.path)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        for statement in _SCHEMA:
            conn.execute(_sql(statement, postgres=False))
        return conn

    def _ensure_postgres(self) -> None:
        """The tables (created once, under an advisory lock), and a leftover privacy.db moved in."""
        if self.url not in _CURRENT_SCHEMAS or self.path.exists():
            with self._postgres.transaction() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
                for statement in _SCHEMA:
                    cursor.execute(_sql(statement, postgres=True))
                moved = self._move_file_in(_Statements(cursor, postgres=True))
            if moved:
                with suppress(FileNotFoundError):  # moved by another process meanwhile
                    os.replace(self.path, self.path.with_name(self.path.name + MOVED_SUFFIX))
            _CURRENT_SCHEMAS.add(self.url)

    def _move_file_in(self, target: _Statements) -> bool:
        """Copy privacy.db's entries into Postgres (idempotent: a copy killed before the rename is done again)."""
        if not self.path.exists():
            return False
        with closing(sqlite3.connect(self.path, timeout=30, isolation_level=None)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            source = _Statements(conn, postgres=False)
            suppressed = source.execute("SELECT hash, kind, added_at, added_by FROM {suppressed}").fetchall() \
                if _has_table(conn, "suppressed") else []
            log = source.execute(f"SELECT {_LOG_COLUMNS} FROM {{log}} ORDER BY seq").fetchall() \
                if _has_table(conn, "privacy_log") else []
        for row in suppressed:
            target.execute("INSERT INTO {suppressed} (hash, kind, added_at, added_by) VALUES (?, ?, ?, ?) "
                           "ON CONFLICT (hash) DO NOTHING", row)
        for row in log:
            target.execute(f"INSERT INTO {{log}} ({_LOG_COLUMNS}) SELECT ?, ?, ?, ?, ?, ? WHERE NOT EXISTS "
                           '(SELECT 1 FROM {log} WHERE at = ? AND "user" = ? AND action = ? AND subject = ?)',
                           (*row, *row[:4]))
        for suffix in ("-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        return True

    def close(self) -> None:
        if self._postgres is not None:
            self._postgres.close()

    def stamp(self) -> tuple:
        """Changes whenever the list does (an entry added or lifted): cheap enough to check before each write."""
        if self.url is None:
            stamps = []
            for file in (self.path, self.path.with_name(self.path.name + "-wal")):
                try:
                    stat = file.stat()
                    stamps.append((stat.st_mtime_ns, stat.st_size))
                except FileNotFoundError:
                    stamps.append(None)
            return tuple(stamps)
        with self._cursor() as cursor:
            return tuple(cursor.execute("SELECT count(*), coalesce(max(seq), 0) FROM {suppressed}").fetchone())

    def listed(self) -> int:
        """How many hashes the list holds (0 when there is no list)."""
        if not self.exists:
            return 0
        with self._cursor() as cursor:
            return cursor.execute("SELECT count(*) FROM {suppressed}").fetchone()[0]

    def suppress(self, key: bytes, subject: Subject) -> int:
        """Add the subject's ids and emails; returns how many were new."""
        user, at = getpass.getuser(), _now()
        with self._cursor() as cursor:
            return sum(cursor.execute("INSERT INTO {suppressed} (hash, kind, added_at, added_by) VALUES (?, ?, ?, ?) "
                                      "ON CONFLICT (hash) DO NOTHING",
                                      (keyed_hash(key, kind, value), kind, at, user)).rowcount
                       for kind, value in _values(subject))

    def lift(self, key: bytes, subject: Subject) -> int:
        with self._cursor() as cursor:
            removed = sum(cursor.execute("DELETE FROM {suppressed} WHERE hash = ?", (keyed_hash(key, kind, value),)).rowcount
                          for kind, value in _values(subject))
        self.log("lift", self.subject_hash(key, subject), {}, removed)
        return removed

    def is_listed(self, key: bytes, subject: Subject) -> bool:
        if not self.exists:
            return False
        with self._cursor() as cursor:
            return any(cursor.execute("SELECT 1 FROM {suppressed} WHERE hash = ?", (keyed_hash(key, kind, value),)).fetchone()
                       for kind, value in _values(subject))

    def hashes(self) -> frozenset[str]:
        if not self.exists:
            return frozenset()
        with self._cursor() as cursor:
            return frozenset(row[0] for row in cursor.execute("SELECT hash FROM {suppressed}").fetchall())

    @staticmethod
    def subject_hash(key: bytes, subject: Subject) -> str:
        """One keyed hash naming the request in the log (its ids and emails, sorted)."""
        return keyed_hash(key, "subject", json.dumps([subject.kol_ids, subject.emails]))

    def log(self, action: str, subject_hash: str, stores: dict[str, int], rows: int) -> int:
        """Record an action; returns its entry's number (for `update`)."""
        with self._cursor() as cursor:
            return cursor.execute(f"INSERT INTO {{log}} ({_LOG_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) RETURNING seq",
                                  (_now(), getpass.getuser(), action, subject_hash, json.dumps(stores, sort_keys=True),
                                   rows)).fetchall()[0][0]

    def update(self, seq: int, action: str, stores: dict[str, int], rows: int) -> None:
        with self._cursor() as cursor:
            cursor.execute("UPDATE {log} SET action = ?, stores = ?, rows = ? WHERE seq = ?",
                           (action, json.dumps(stores, sort_keys=True), rows, seq))

    def entries(self) -> list[tuple]:
        if not self.exists:
            return []
        with self._cursor() as cursor:
            return [tuple(row) for row in cursor.execute(f"SELECT {_LOG_COLUMNS} FROM {{log}} ORDER BY seq").fetchall()]


class _Statements:
    """Statements with the privacy tables as `{suppressed}` and `{log}`, on either engine."""

    def __init__(self, target: Any, postgres: bool) -> None:
        self.target, self.postgres = target, postgres

    def execute(self, statement: str, params: Iterable[Any] = ()) -> Any:
        return self.target.execute(_sql(statement, self.postgres), tuple(params))


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _values(subject: Subject) -> Iterable[tuple[str, str]]:
    yield from (("kol", kol_id) for kol_id in subject.kol_ids)
    yield from (("email", email) for email in subject.emails)


class Suppression:
    """What a sync or receiver checks rows and events against: loaded once per run (hashes only)."""

    def __init__(self, key: bytes | None, hashes: frozenset[str]) -> None:
        self.key, self.hashes = key, hashes

    @classmethod
    def load(cls, data_dir: str | Path, location: str | Path | None = None) -> Suppression:
        """The list beside the data directory's inbox (`location`, default COMMOPS_INBOX_URL, else the file);
        PrivacyKeyMissing (one line) when it holds entries and the key is not set."""
        return cls.of(PrivacyStore(data_dir, location))

    @classmethod
    def of(cls, store: PrivacyStore) -> Suppression:
        hashes = store.hashes()
        if not hashes:
            return cls(None, frozenset())
        if not os.environ.get(PRIVACY_KEY_ENV):
            raise PrivacyKeyMissing(f"the suppression list {store.where} holds {len(hashes)} entr"
                                    f"{'y' if len(hashes) == 1 else 'ies'} and {PRIVACY_KEY_ENV} is not set: "
                                    "refusing to start (set the key the list was written with)")
        return cls(privacy_key(), hashes)

    def __bool__(self) -> bool:
        return bool(self.hashes)

    def suppressed(self, kol_id: str | None = None, email: str | None = None) -> bool:
        if not self.hashes or self.key is None:
            return False
        return bool((kol_id and keyed_hash(self.key, "kol", kol_id) in self.hashes)
                    or (email and email.strip() and keyed_hash(self.key, "email", email) in self.hashes))


def drop_suppressed(batch: pa.RecordBatch, suppression: Suppression) -> tuple[pa.RecordBatch, int]:
    """The batch without the rows of suppressed KOLs (by `id` and `email` where the batch has them)."""
    if not suppression or batch.num_rows == 0:
        return batch, 0
    names = batch.schema.names
    ids = batch.column("id").to_pylist() if "id" in names else [None] * batch.num_rows
    emails = batch.column("email").to_pylist() if "email" in names else [None] * batch.num_rows
    keep = [not suppression.suppressed(kol_id, email) for kol_id, email in zip(ids, emails, strict=True)]
    dropped = keep.count(False)
    return (batch.filter(pa.array(keep)) if dropped else batch), dropped


def event_suppressed(data: object, suppression: Suppression) -> bool:
    """Whether any string of a webhook event's data is a suppressed KOL id or email."""
    if not suppression:
        return False
    if isinstance(data, dict):
        return any(event_suppressed(value, suppression) for value in data.values())
    if isinstance(data, list):
        return any(event_suppressed(value, suppression) for value in data)
    return isinstance(data, str) and suppression.suppressed(kol_id=data, email=data if "@" in data else None)


class WatchedSuppression:
    """The list of a long-running process (the receiver): read again whenever it changes (privacy.db's
    files, or in Postgres the list's count and newest entry, checked before each write), so an erasure
    on any host applies to events arriving after it without a restart. Fails closed as `Suppression.load`."""

    def __init__(self, data_dir: str | Path, location: str | Path | None = None) -> None:
        self.store = PrivacyStore(data_dir, location)
        self._stamp = self.store.stamp()
        self.current = Suppression.of(self.store)

    def get(self) -> Suppression:
        stamp = self.store.stamp()
        if stamp != self._stamp:
            self.current, self._stamp = Suppression.of(self.store), stamp
        return self.current
