"""The inbox's two stores: a SQLite file (the default) and a Postgres database (COMMOPS_INBOX_URL).

`resources/inbox/inbox.py` writes every query once, in the SQL both engines share (`?` parameters,
the table as `{events}`); a store owns what differs: its connection (one per thread), its
transactions, its schema and upgrades, and how a transaction locks the rows it reads:
- SQLite: `BEGIN IMMEDIATE` takes the file's write lock up front, so a transaction that reads
  then updates is alone; no row lock is needed.
- Postgres: `SELECT ... FOR UPDATE` (`lock_rows`) waits for the rows another transaction holds;
  `FOR UPDATE SKIP LOCKED` (`skip_locked`) passes them by, so two claimers take disjoint rows.

A store also owns how a payload is searched (`payload_matches`: the payload, lower-cased, against a
regular expression written for Python, RE2 and Postgres alike) and how deleted rows are removed for
good (`purge`): SQLite zeroes them (secure_delete), then VACUUM and a TRUNCATE checkpoint of the
write-ahead log; Postgres deletes them, then VACUUMs the table (its dead tuples and their TOAST
chunks freed at once, never an exclusive lock: receivers go on meanwhile).

A store's `where` names it in logs and messages: the file, or `postgresql://HOST:PORT/DATABASE`
(never the user or password of the URL).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from resources.postgres_urls import connection_error, redacted

from file_modes import private_dir, private_sqlite_file

BUSY_TIMEOUT_MS = 30_000
INBOX_URL_ENV = "COMMOPS_INBOX_URL"
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2")
POSTGRES_TABLE = "commops_inbox_events"  # a database shared with Dagster's storage: a name of our own
_SCHEMA_LOCK = 7_264_001  # pg_advisory_xact_lock key: processes creating the schema at once take turns

# Columns added after the first schema: added in place to inboxes made before them.
ADDED_COLUMNS = {
    "quarantined_at": "TEXT",  # set aside (never applied until retried)
    "retry_after": "TEXT",  # not taken again before this time (after a failed application)
    "failed_by": "TEXT",  # the run whose failure was counted last: one attempt per run
    "claimed_by": "TEXT",  # the run applying the event now (with claimed_until: its lease)
    "claimed_until": "TEXT",  # the claim lapses after this time (a run that died without a word)
}
OPEN = "applied_at IS NULL AND quarantined_at IS NULL"
# The first schema's columns: (name, SQLite type, Postgres type); later ones are ADDED_COLUMNS.
FIRST_COLUMNS = (
    ("seq", "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"),
    ("id", "TEXT NOT NULL UNIQUE", "TEXT NOT NULL UNIQUE"),
    ("event", "TEXT NOT NULL", "TEXT NOT NULL"),
    ("created_at", "TEXT NOT NULL", "TEXT NOT NULL"),
    ("organization_id", "TEXT", "TEXT"),
    ("received_at", "TEXT NOT NULL", "TEXT NOT NULL"),
    ("payload", "BLOB NOT NULL", "BYTEA NOT NULL"),
    ("known_event", "INTEGER NOT NULL", "BOOLEAN NOT NULL"),
    ("applied_at", "TEXT", "TEXT"),
    ("attempts", "INTEGER NOT NULL DEFAULT 0", "INTEGER NOT NULL DEFAULT 0"),
    ("last_error", "TEXT", "TEXT"),
)


def _first_columns(engine: int) -> str:
    """The first schema's column definitions for one engine (1: SQLite, 2: Postgres)."""
    return ", ".join(f"{column[0]} {column[engine]}" for column in FIRST_COLUMNS)


class InboxUnreachable(RuntimeError):
    """The store cannot be opened; the message is one line naming it (never a password) and the cause."""


def is_postgres_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.split("://", 1)[0] in POSTGRES_SCHEMES and "://" in location


class _Cursor:
    """One statement at a time, the same on both engines: execute(sql, params) -> self."""

    def __init__(self, raw: Any, translate: Any) -> None:
        self._raw = raw
        self._translate = translate

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Cursor:
        result = self._raw.execute(self._translate(sql), tuple(params))
        if result is not None:  # sqlite3 returns a new cursor; psycopg2 keeps its own
            self._raw = result
        return self

    @property
    def rowcount(self) -> int:
        return self._raw.rowcount

    def fetchone(self) -> tuple | None:
        return self._raw.fetchone()

    def fetchall(self) -> list[tuple]:
        return self._raw.fetchall()


class SqliteStore:
    """The file at `path`: WAL, synchronous=FULL (a commit is on disk before the receiver answers),
    a busy timeout; any number of processes on one host."""

    table = "events"
    lock_rows = ""
    skip_locked = ""
    payload_matches = "commops_payload_matches(payload, ?)"  # a function of every connection (connect)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self._local = threading.local()
        try:
            private_dir(self.path.parent)  # the payloads hold personal data: owner-only
            private_sqlite_file(self.path)
            self._ensure_schema()
        except (OSError, sqlite3.Error) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise InboxUnreachable(f"cannot open the inbox {self.path}: {reason} (is COMMOPS_DATA_DIR writable?)") from None

    @contextmanager
    def transaction(self) -> Iterator[_Cursor]:
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield _Cursor(conn, _sqlite_sql)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return _Cursor(self.connection(), _sqlite_sql).execute(sql, params).fetchall()

    def connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def purge(self, where: str, params: Sequence[Any], compact: bool) -> int:
        """Delete the events `where` holds, their bytes zeroed; then (when any went, or `compact`) VACUUM
        and a TRUNCATE checkpoint, so neither the file nor its write-ahead log keeps them. Returns how many."""
        conn = self.connection()
        [(before,)] = conn.execute("PRAGMA secure_delete").fetchall()
        conn.execute("PRAGMA secure_delete = ON")
        try:
            with self.transaction() as cursor:
                count = cursor.execute(f"DELETE FROM {{events}} WHERE {where}", params).rowcount
        finally:
            conn.execute(f"PRAGMA secure_delete = {int(before)}")
        if count or compact:
            conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return count

    def _ensure_schema(self) -> None:
        """Create the table, or add the columns and index an older file lacks (in place, once, under the
        write lock, so processes opening the same file at once agree)."""
        if self._schema_current():
            return
        with self.transaction() as cursor:
            cursor.execute(_SQLITE_TABLE)
            present = {row[1] for row in cursor.execute("PRAGMA table_info(events)").fetchall()}
            for name, type_ in ADDED_COLUMNS.items():
                if name not in present:
                    cursor.execute(f"ALTER TABLE events ADD COLUMN {name} {type_}")
            cursor.execute("DROP INDEX IF EXISTS events_pending")  # the first schema's (applied_at IS NULL only)
            cursor.execute(f"CREATE INDEX IF NOT EXISTS events_open ON events (seq) WHERE {OPEN}")

    def _schema_current(self) -> bool:
        present = {row[1] for row in self.read("PRAGMA table_info(events)")}
        indexed = self.read("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'events_open'")
        return bool(present) and set(ADDED_COLUMNS) <= present and bool(indexed)


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection with the inbox's pragmas: WAL, synchronous=FULL, busy timeout; autocommit mode."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.create_function("commops_payload_matches", 2, _payload_matches, deterministic=True)
    return conn


def _payload_matches(payload: bytes | str | None, regex: str) -> bool:
    """SQLite's `payload_matches`: the payload, decoded and lower-cased, holds a match of `regex`."""
    if payload is None:
        return False
    text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
    return re.search(regex, text.lower()) is not None  # re caches the compiled pattern


_SQLITE_TABLE = f"CREATE TABLE IF NOT EXISTS events ({_first_columns(1)})"


@lru_cache(maxsize=256)
def _sqlite_sql(sql: str) -> str:
    return sql.replace("{events}", SqliteStore.table)


class PostgresStore:
    """The table `commops_inbox_events` of the database at `url` (created when missing, upgraded in
    place), for receivers and Dagster processes on several hosts. Read committed; every write is
    one transaction, committed before the receiver answers."""

    table = POSTGRES_TABLE
    lock_rows = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # The receiver stores UTF-8 bodies only (it answers 400 to any other), so every payload converts.
    payload_matches = "lower(convert_from(payload, 'UTF8')) ~ ?"

    def __init__(self, url: str) -> None:
        self.url = re.sub(r"^postgres(ql\+psycopg2)?://", "postgresql://", url)  # libpq's form
        self.where = redacted(self.url)
        self._local = threading.local()
        try:
            import psycopg2
        except ImportError:
            raise InboxUnreachable(f"{INBOX_URL_ENV} is a Postgres URL: install the deploy extra "
                                   "(pip install -e '.[deploy]')") from None
        self._errors = (psycopg2.OperationalError, psycopg2.InterfaceError)
        self._ensure_schema()

    @contextmanager
    def transaction(self) -> Iterator[_Cursor]:
        conn = self.connection()
        try:
            with conn, conn.cursor() as raw:  # commits at the end, rolls back on an exception
                yield _Cursor(raw, _postgres_sql)
        except self._errors:
            self.close()  # a broken connection: the next call connects again
            raise

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self.transaction() as cursor:
            return cursor.execute(sql, params).fetchall()

    def connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            import psycopg2

            try:
                conn = psycopg2.connect(self.url, connect_timeout=10, application_name="commops-inbox")
            except psycopg2.Error as error:  # a malformed URL too (ProgrammingError), which libpq quotes
                raise InboxUnreachable(connection_error(INBOX_URL_ENV, self.url, error)) from None
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            if not conn.closed:
                conn.close()
            self._local.conn = None

    def purge(self, where: str, params: Sequence[Any], compact: bool) -> int:
        """Delete the events `where` holds; then (when any went, or `compact`) VACUUM the table: the dead
        tuples and their TOAST chunks are freed at once (a plain VACUUM: receivers and runs go on meanwhile).
        Returns how many."""
        with self.transaction() as cursor:
            count = cursor.execute(f"DELETE FROM {{events}} WHERE {where}", params).rowcount
        if count or compact:
            conn = self.connection()
            conn.autocommit = True  # VACUUM cannot run inside a transaction
            try:
                with conn.cursor() as raw:
                    raw.execute(f"VACUUM {self.table}")
            finally:
                conn.autocommit = False
        return count

    def _ensure_schema(self) -> None:
        """Create the table, or add the columns and index an older one lacks; checked with a read first
        (DDL takes the table's exclusive lock), once per process and database."""
        if self.url in _CURRENT_SCHEMAS or self._schema_current():
            _CURRENT_SCHEMAS.add(self.url)
            return
        with self.transaction() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
            cursor.execute(_POSTGRES_TABLE)
            for name, type_ in ADDED_COLUMNS.items():
                cursor.execute(f"ALTER TABLE {{events}} ADD COLUMN IF NOT EXISTS {name} {type_}")
            cursor.execute(f"CREATE INDEX IF NOT EXISTS {{events}}_open ON {{events}} (seq) WHERE {OPEN}")
        _CURRENT_SCHEMAS.add(self.url)

    def _schema_current(self) -> bool:
        present = {row[0] for row in self.read(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ?", (self.table,))}
        indexed = self.read("SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?",
                            (f"{self.table}_open",))
        return bool(present) and set(ADDED_COLUMNS) <= present and bool(indexed)


_CURRENT_SCHEMAS: set[str] = set()  # databases whose schema this process found (or made) current

_POSTGRES_TABLE = f"CREATE TABLE IF NOT EXISTS {{events}} ({_first_columns(2)})"


@lru_cache(maxsize=256)
def _postgres_sql(sql: str) -> str:
    return sql.replace("{events}", PostgresStore.table).replace("?", "%s")


def open_store(location: str | Path) -> SqliteStore | PostgresStore:
    """A Postgres URL (postgresql://, postgres:// or postgresql+psycopg2://) or a SQLite file path."""
    return PostgresStore(str(location)) if is_postgres_url(location) else SqliteStore(location)
