"""In-memory DuckDB databases kept open for the life of a process, one per configuration.

Opening a DuckDB database costs tens of milliseconds; a cursor of an open one (a connection of its own, with its
own transaction, temporary tables and registered views) costs nothing. A run opens many short sessions: a staged
snapshot's hashing, each warehouse write, each with a database of its own until now. So they take cursors of the
process's database of their configuration instead, and a warehouse session attaches the warehouse file to it for
its length (`attached`): the file is closed when the session ends, as before, so another process may open it.

Per pid: a forked child must not use its parent's databases, and opens its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from resources.sql import sql_literal

_DATABASES: dict[tuple, duckdb.DuckDBPyConnection] = {}
_LOCK = threading.Lock()
_BUILT_IN = ("memory", "system", "temp")


def process_database(memory_limit: str, threads: int, file_search_path: str | None = None) -> duckdb.DuckDBPyConnection:
    """This process's in-memory database of this configuration (take a `.cursor()` of it, never close it)."""
    key = (os.getpid(), memory_limit, threads, file_search_path)
    with _LOCK:
        database = _DATABASES.get(key)
        if database is None:
            config = {"memory_limit": memory_limit, "threads": threads}
            if file_search_path is not None:
                config["file_search_path"] = file_search_path
            database = _DATABASES[key] = duckdb.connect(config=config)
        return database


@contextmanager
def attached(path: str, alias: str, options: str, *, memory_limit: str, threads: int,
             file_search_path: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection with the database file `path` attached as `alias` (ATTACH `options`) and in use; when it
    ends, the connection is closed (an open transaction rolled back) and every file attached meanwhile is
    detached, so no file stays open. Callers hold the file's writer lock, so two sessions never attach one file
    at once. Should a detach fail, the whole database is closed and forgotten: the next session opens a new one."""
    database = process_database(memory_limit, threads, file_search_path)
    conn = database.cursor()
    try:
        conn.execute(f"ATTACH {sql_literal(path)} AS {alias} {options}".rstrip())
        conn.execute(f"USE {alias}")
        yield conn
    finally:
        conn.close()
        _detach_all(database, memory_limit, threads, file_search_path)


def _detach_all(database: duckdb.DuckDBPyConnection, *config) -> None:
    try:
        with database.cursor() as conn:
            for (name,) in conn.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal").fetchall():
                if name not in _BUILT_IN:
                    conn.execute(f'DETACH "{name}"')
    except duckdb.Error:
        with _LOCK:
            _DATABASES.pop((os.getpid(), *config), None)
        database.close()
