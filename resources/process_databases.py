"""In-memory DuckDB databases kept open for the life of a process.

Opening a DuckDB database costs tens of milliseconds; a cursor of an open one (a connection of its own, with its
own transaction, temporary tables and registered views) costs nothing. A run opens many short sessions: a staged
snapshot's hashing, each warehouse write, each with a database of its own until now. So they take cursors of a
database the process keeps instead:

- `process_database`: one per configuration, for the life of the process (the lake's staging);
- `attached`: a warehouse session, the file attached to the database of its configuration for the session's
  length and detached at its end, so the file is closed between sessions and another process may open it. The
  databases no session uses are closed beyond the few most recently used (a process that writes to many data
  directories, a test worker's, would otherwise keep one each, with its threads).

Per pid: a forked child must not use its parent's databases, and opens its own.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import duckdb

from resources.sql import sql_literal

IDLE_KEPT = 4  # databases of `attached` kept open while no session uses them
_BUILT_IN = ("memory", "system", "temp")


def process_database(memory_limit: str, threads: int) -> duckdb.DuckDBPyConnection:
    """This process's in-memory database of this configuration (take a `.cursor()` of it, never close it)."""
    return _pinned(os.getpid(), memory_limit, threads)


@cache
def _pinned(pid: int, memory_limit: str, threads: int) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(config={"memory_limit": memory_limit, "threads": threads})


@dataclass
class _Entry:
    database: duckdb.DuckDBPyConnection
    sessions: int = 0


_SESSION_DATABASES: OrderedDict[tuple, _Entry] = OrderedDict()
_LOCK = threading.Lock()


@contextmanager
def attached(path: str, alias: str, options: str, *, memory_limit: str, threads: int,
             file_search_path: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection with the database file `path` attached as `alias` (ATTACH `options`) and in use; when it
    ends, the connection is closed (an open transaction rolled back) and every file attached meanwhile is
    detached, so no file stays open. Callers hold the file's writer lock, and a database serves one
    `file_search_path` (one data directory, one lock), so two sessions never share a database at once. Should
    a detach fail, the database is closed: the next session opens a new one."""
    key = (os.getpid(), memory_limit, threads, file_search_path)
    entry = _take(key)
    conn = entry.database.cursor()
    try:
        conn.execute(f"ATTACH {sql_literal(path)} AS {alias} {options}".rstrip())
        conn.execute(f"USE {alias}")
        yield conn
    finally:
        conn.close()
        _give_back(key, entry, detached=_detach_all(entry.database))


def _take(key: tuple) -> _Entry:
    with _LOCK:
        entry = _SESSION_DATABASES.get(key)
        if entry is None:
            _, memory_limit, threads, file_search_path = key
            entry = _SESSION_DATABASES[key] = _Entry(duckdb.connect(config={
                "memory_limit": memory_limit, "threads": threads, "file_search_path": file_search_path}))
        _SESSION_DATABASES.move_to_end(key)
        entry.sessions += 1
        return entry


def _give_back(key: tuple, entry: _Entry, *, detached: bool) -> None:
    closing = []
    with _LOCK:
        entry.sessions -= 1
        if not detached and _SESSION_DATABASES.get(key) is entry:
            del _SESSION_DATABASES[key]
        if not detached and entry.sessions == 0:
            closing.append(entry.database)
        idle = [k for k, e in _SESSION_DATABASES.items() if e.sessions == 0]
        for stale in idle[:max(0, len(idle) - IDLE_KEPT)]:
            closing.append(_SESSION_DATABASES.pop(stale).database)
    for database in closing:
        database.close()


def _detach_all(database: duckdb.DuckDBPyConnection) -> bool:
    try:
        with database.cursor() as conn:
            for (name,) in conn.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal").fetchall():
                if name not in _BUILT_IN:
                    conn.execute(f'DETACH "{name}"')
        return True
    except duckdb.Error:
        return False
