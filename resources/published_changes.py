"""Publishing only what a run changed: the rows its writes touched, copied into analytics.duckdb.

A full publish copies the whole warehouse and the marts' tables into a new analytics.duckdb. A run whose
writer sessions recorded the keys they merged (`WarehouseSession(track=True)`: the webhook job's) can
instead take the published copy and replace those rows (and their child rows) with the warehouse's, if
nothing else changed either file since that copy was made. That is proved by the files' states:
- the published copy records, in a sidecar beside it (SIDECAR), the warehouse's and the marts file's
  states it was made from, and its own inode (a copy replaced by anything else no longer matches);
- each writer session of the run records the warehouse's state before and after it.
The chain must be unbroken: the copy's source is the state before the run's first write, each write
starts where the one before ended, and the warehouse is still as the last one left it. Anything else (a
write by another process, a session that did not record its keys, erasure, a marts build) takes a full
publish. The incremental copy is replaced atomically like a full one: a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from resources.sql import sql_literal, transaction

SIDECAR_SUFFIX = ".source.json"  # analytics.duckdb.source.json
KEYS_VIEW = "_published_keys"


@dataclass(frozen=True)
class FileState:
    """A file as some write left it (None-equivalent: `absent`)."""

    mtime_ns: int = 0
    size: int = -1  # -1: absent

    @classmethod
    def of(cls, path: Path) -> FileState:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return cls()
        return cls(stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class Touched:
    """The keys one merge met, in one organization: those rows, and their child rows, are what changed."""

    table: str
    key: str
    children: tuple[tuple[str, str], ...]  # (child table, its parent key column)
    org: str
    keys: pa.Array


@dataclass
class Write:
    """One writer session: the warehouse before and after it, and what it touched (None: not recorded)."""

    before: FileState
    after: FileState = FileState()
    touched: list[Touched] | None = field(default_factory=list)


def sidecar(analytics: Path) -> Path:
    return analytics.with_name(analytics.name + SIDECAR_SUFFIX)


def record_source(analytics: Path, warehouse: FileState, marts: FileState) -> None:
    """Beside the copy just put in place: what it was made from."""
    inode = analytics.stat().st_ino
    text = json.dumps({"inode": inode, "warehouse": asdict(warehouse), "marts": asdict(marts)})
    temp = sidecar(analytics).with_suffix(f".{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, sidecar(analytics))


def in_step(analytics: Path, writes: list[Write], warehouse: FileState, marts: FileState) -> bool:
    """Whether the published copy plus the rows `writes` touched is the warehouse as it stands."""
    if not writes or any(write.touched is None for write in writes):
        return False
    try:
        source = json.loads(sidecar(analytics).read_text())
        if source["inode"] != analytics.stat().st_ino:
            return False
        published_from = FileState(**source["warehouse"])
        published_marts = FileState(**source["marts"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    chained = all(later.before == earlier.after for earlier, later in zip(writes, writes[1:]))
    return published_from == writes[0].before and chained and warehouse == writes[-1].after and marts == published_marts


class NotInStep(Exception):
    """The published copy lacks a table or column the warehouse has: a full publish is needed."""


def apply_touched(conn: duckdb.DuckDBPyConnection, database: str, writes: list[Write]) -> None:
    """In the copy `conn` opened (the warehouse attached as `database`), replace every touched row and its
    child rows with the warehouse's, in one transaction."""
    with transaction(conn):
        for write in writes:
            for touched in write.touched or ():
                conn.register(KEYS_VIEW, pa.table({"k": touched.keys}))
                try:
                    for table, key in ((touched.table, touched.key), *touched.children):
                        _replace_rows(conn, database, table, key, touched.org)
                finally:
                    conn.unregister(KEYS_VIEW)


def _replace_rows(conn: duckdb.DuckDBPyConnection, database: str, table: str, key: str, org: str) -> None:
    if not _same_columns(conn, database, table):
        raise NotInStep(table)
    where = f"org = {sql_literal(org)} AND {key} IN (SELECT k FROM {KEYS_VIEW})"
    conn.execute(f"DELETE FROM main.{table} WHERE {where}")
    conn.execute(f"INSERT INTO main.{table} BY NAME SELECT * FROM {database}.main.{table} WHERE {where}")


def _same_columns(conn: duckdb.DuckDBPyConnection, database: str, table: str) -> bool:
    """Whether the copy's `table` has the warehouse's columns, in the same order and of the same types."""
    [(copy, source)] = conn.execute(
        "SELECT list(column_name || ' ' || data_type ORDER BY column_index) FILTER (WHERE database_name = current_database()), "
        "list(column_name || ' ' || data_type ORDER BY column_index) FILTER (WHERE database_name = ?) "
        "FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ?", [database, table]).fetchall()
    return bool(source) and copy == source
