"""Dagster's SQLite storage (the embedded instance's run history) committing without waiting for the disk.

Dagster's SQLite storage opens a connection for every event it stores and closes it after. SQLite in WAL mode
syncs the log at every commit, and the last connection to close checkpoints the database and deletes the log:
a small `commops sync` made about 2,000 fdatasync calls, most of a second of waiting on this project's disks.

Here every connection to a database of Dagster's SQLite storage (`<home>/history/`, `<home>/schedules/`) commits
with `synchronous=NORMAL`, and the process keeps one idle connection to each such database once it is in WAL
mode, so that the connections Dagster closes are not the last and do not checkpoint. In WAL mode this is
SQLite's documented safe setting: a database is never corrupted, and a commit survives the process being killed;
a power cut can undo the last commits before it. Only Dagster's run history is concerned: the warehouse, the
lake and the inbox keep their own durable commits, and a deployment on Postgres is untouched.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

KEPT_DATABASES = 16  # a process writes the index, the runs and one shard per run it executes
_kept: OrderedDict[str, sqlite3.Connection] = OrderedDict()
_lock = threading.Lock()


def relax_history_commits() -> None:
    """Install the hook for this process's connections to Dagster's SQLite storage (idempotent)."""
    if not event.contains(Engine, "connect", _on_connect):
        event.listen(Engine, "connect", _on_connect)


def is_dagster_history(path: Path) -> bool:
    """Whether `path` is one of the databases Dagster's SQLite storage keeps under its home."""
    folder, above = path.parent.name, path.parent.parent.name
    return ((folder, above) == ("runs", "history")  # the events' index and one file per run
            or (path.name, folder) in {("runs.db", "history"), ("schedules.db", "schedules")})


def _on_connect(dbapi_connection: object, _record: object) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    database = dbapi_connection.execute("PRAGMA database_list").fetchone()
    if not database or not database[2] or not is_dagster_history(Path(database[2])):
        return
    dbapi_connection.execute("PRAGMA synchronous = NORMAL")
    _keep_open(database[2])


def _keep_open(path: str) -> None:
    """An idle connection to `path`, held while the process lives (the most recent few), once it is in WAL mode:
    Dagster sets the mode when it creates a database, and switching a database to WAL wants no other connection."""
    with _lock:
        if path in _kept:
            _kept.move_to_end(path)
            return
        keeper = sqlite3.connect(path, check_same_thread=False)
        if keeper.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            keeper.close()
            return
        _kept[path] = keeper
        while len(_kept) > KEPT_DATABASES:
            _kept.popitem(last=False)[1].close()
