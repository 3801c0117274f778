"""SQLite connections, schema creation, transactions, ids and timestamps."""

from __future__ import annotations

import secrets
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from commops_spec.constants import SCOPES as SPEC_SCOPES
from file_modes import private_sqlite_file
from service.scopes import WEBHOOKS_WRITE
from service.store import search

_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
SCHEMA_VERSION = 1  # PRAGMA user_version once _migrate has run


def connect(path: str | Path) -> sqlite3.Connection:
    """Open a connection tuned for one writer and many readers (WAL)."""
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA cache_size = -65536")
    return conn


def init_db(path: str | Path) -> None:
    """Create the database file and its schema if they do not exist yet; bring the schema of
    an older database up to date (columns added since: service/store/search.py). The file is
    owner-only (it holds webhook signing secrets and KOLs' personal data), and so is a folder made for it."""
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    private_sqlite_file(Path(path))
    schema = resources.files("service.store").joinpath("schema.sql").read_text()
    conn = connect(path)
    try:
        conn.executescript(schema)
        _migrate(conn)
    finally:
        conn.close()


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a database of an older schema version up to SCHEMA_VERSION, once, in one transaction.

    Version 1: the folded search_text columns; keys holding every scope of the
    spec (created with `all`) are granted the new webhooks:write scope."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    with transaction(conn):
        if conn.execute("PRAGMA user_version").fetchone()[0] < 1:  # another process may have migrated meanwhile
            search.add_column(conn)
            for key_id, scopes in conn.execute("SELECT id, scopes FROM api_keys").fetchall():
                held = scopes.split(",")
                if set(SPEC_SCOPES) <= set(held) and WEBHOOKS_WRITE not in held:
                    conn.execute("UPDATE api_keys SET scopes = ? WHERE id = ?", (",".join([*held, WEBHOOKS_WRITE]), key_id))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class ConnectionPool:
    """One connection per thread (FastAPI runs sync endpoints in a thread pool)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


def new_id(prefix: str, length: int = 16) -> str:
    """An opaque identifier with the spec's prefix, e.g. kol_3f9a0c...; random, not guessable."""
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def now_iso() -> str:
    """The current UTC time in the storage format (sortable as text)."""
    return to_iso(datetime.now(UTC))


def to_iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
