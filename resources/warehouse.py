"""The DuckDB warehouse: its one write path (tables, newer-row-wins merges, history views) and
the analysts' published copy.

One writer at a time: Dagster's "warehouse" pool serialises queued runs, but runs executed
in-process (`commops sync`, `materialize`) bypass the queue, so `WarehouseResource.writer`
also takes an OS file lock and waits for it. Publishing is a separate, explicit step (the
`analytics` asset, once per run): the closed warehouse file is copied to analytics.duckdb with
an atomic rename, so analysts hold that copy open, never the file the sync writes.

The catalog (sync/catalog.py) describes the tables; this module only needs the shape below.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import dagster as dg
import duckdb
import pyarrow as pa
from pydantic import PrivateAttr

from resources.background_writer import BackgroundWriter
from resources.digest import DIGEST_COLUMN, DIGEST_COMMENT, content_fields, digest_sql
from resources.files import holding_lock, remove_abandoned
from resources.marts import MARTS_FILE, copy_marts_into
from resources.orgs import DEFAULT_ORG
from resources.process_databases import attached
from resources.published_changes import FileState, NotInStep, Touched, Write, apply_touched, in_step, record_source, sidecar
from resources.sql import sql_literal, transaction

WAREHOUSE_FILE = "warehouse.duckdb"
WAREHOUSE_DATABASE = "warehouse"  # its name in a session's catalog
ANALYTICS_FILE = "analytics.duckdb"
LOCK_FILE = "warehouse.lock"
ORG_COLUMN = "org"  # every table's first key column: the organization (commops orgs) the row belongs to
ORG_COMMENT = "Organization the row belongs to (commops orgs list; `default` in a single-organization setup)"
ARCHIVED_COLUMN = "is_archived"  # a row archived in the service (KOLs): counted as it becomes true
LOAD_COLUMNS = (
    ("_snapshot_date", "DATE", "Snapshot date (the day the run read it) of the latest snapshot holding the row"),
    ("_loaded_at", "TIMESTAMPTZ", "Time the sync wrote this version of the row (UTC)"),
)

# Also a plain Python logger, so in-process runs (`commops sync`) can show lock waits on the terminal.
_logger = logging.getLogger("commops.warehouse")


class ChildSpec(Protocol):
    name: str
    description: str
    columns: tuple[tuple[str, str, str], ...]  # (name, DuckDB type, comment); the first is the parent's id
    select_sql: str  # child rows selected from `{parents}` (the parent rows to expand), aliased `p`

    @property
    def parent_key(self) -> str: ...


class TableSpec(Protocol):
    """What the warehouse needs to know of a table (sync.catalog.ResourceSpec has it)."""

    table: str
    key: str
    version: tuple[str, ...]  # compared field by field; a NULL on either side defers to the next
    observed: tuple[str, ...]  # fields recording when a row was received, not what it says (left out of its digest)
    schema: pa.Schema
    description: str
    children: tuple[ChildSpec, ...]

    @property
    def history_view(self) -> str: ...


def duckdb_type(type_: pa.DataType) -> str:
    """The DuckDB column type of an Arrow type of the schemas (what DuckDB reads from their Parquet)."""
    if pa.types.is_string(type_):
        return "VARCHAR"
    if pa.types.is_int64(type_):
        return "BIGINT"
    if pa.types.is_float64(type_):
        return "DOUBLE"
    if pa.types.is_boolean(type_):
        return "BOOLEAN"
    if pa.types.is_timestamp(type_):
        return "TIMESTAMP WITH TIME ZONE" if type_.tz else "TIMESTAMP"
    if pa.types.is_map(type_):
        return f"MAP({duckdb_type(type_.key_type)}, {duckdb_type(type_.item_type)})"
    if pa.types.is_list(type_):
        return f"{duckdb_type(type_.value_type)}[]"
    if pa.types.is_struct(type_):
        return "STRUCT(" + ", ".join(f'"{f.name}" {duckdb_type(f.type)}' for f in type_) + ")"
    raise TypeError(f"no DuckDB type for Arrow {type_}")


def column_type(field: pa.Field) -> str:
    """DuckDB type of a schema field: fields marked {"json": "true"} (`_extra`, ...) are JSON text."""
    is_json = (field.metadata or {}).get(b"json") == b"true"
    return "JSON" if is_json else duckdb_type(field.type)


def column_storage(field: pa.Field) -> str:
    """The column's compression clause: ` USING COMPRESSION zstd` for fields marked {"compression": "zstd"}
    (long free text, where DuckDB's default dictionary and FSST encodings cost more and keep less), else ""."""
    compression = (field.metadata or {}).get(b"compression")
    return f" USING COMPRESSION {compression.decode()}" if compression else ""


def description(field: pa.Field) -> str:
    return (field.metadata or {}).get(b"description", b"").decode()


@dataclass(frozen=True)
class MergeCounts:
    """What one merge wrote: rows new to the table, rows it replaced, and of those, rows that became archived
    (`archived` None: the table has no `is_archived`)."""

    inserted: int
    updated: int
    archived: int | None


class WarehouseSession:
    """An open read-write connection with the warehouse's write operations. `conn` is there for reads."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, touched: list[Touched] | None = None):
        self.conn = conn
        self.touched = touched  # when given, every merge adds the keys it met (resources/published_changes.py)
        self.read_from_changes: int | None = None  # rows the last merge read whole from a side file, if it had one
        self.merge_counts: MergeCounts | None = None  # what the last merge wrote

    def ensure_table(self, spec: TableSpec) -> None:
        """Create the current-state table (and its children) from the Arrow schema; add new columns. A
        table from before organizations is rebuilt once, its rows the organization `default`'s, and one
        made with a primary key is rebuilt once without it (nothing is dropped either way).

        One row per (org, key) is the write path's to keep (`merge`, under the writer lock) and the
        `ids_unique_and_prefixed` check's to prove, not a primary key's: DuckDB's primary key is an
        ART index that must fit in memory, and at a million rows it does not within `memory_limit`
        (docs/spec-decisions.md#no-primary-key)."""
        wanted = {ORG_COLUMN: "VARCHAR"} | {f.name: column_type(f) for f in spec.schema}
        wanted.update({name: type_ for name, type_, _ in LOAD_COLUMNS})
        wanted[DIGEST_COLUMN] = "UBIGINT"
        storage = {f.name: column_storage(f) for f in spec.schema}
        existing = self._columns(spec.table)
        if existing and ORG_COLUMN not in existing:
            self._adopt_single_org(spec.table)
            existing = self._columns(spec.table)
        elif existing and self._has_primary_key(spec.table):
            self._rebuild(spec.table, existing, "*")
            _logger.info(f"warehouse: {spec.table} rebuilt without its primary key (an index that must fit in memory)")
        if not existing:
            columns = ", ".join(f'"{name}" {type_}{storage.get(name, "")}' for name, type_ in wanted.items())
            self.conn.execute(f"CREATE TABLE {spec.table} ({columns})")
        else:
            for name, type_ in wanted.items():
                if name not in existing:
                    self.conn.execute(f'ALTER TABLE {spec.table} ADD COLUMN "{name}" {type_}{storage.get(name, "")}')
                elif type_ == "JSON" and existing[name] != "JSON":  # tables made before _extra was JSON
                    self.conn.execute(f'ALTER TABLE {spec.table} ALTER COLUMN "{name}" TYPE JSON')
            if DIGEST_COLUMN not in existing:  # rows written before digests: hashed once, as a load would
                self.conn.execute(f"UPDATE {spec.table} SET {DIGEST_COLUMN} = {row_digest(spec)}")
        for child in spec.children:
            wanted_child = [(ORG_COLUMN, "VARCHAR")] + [(name, type_) for name, type_, _ in child.columns]
            wanted_child += [(name, type_) for name, type_, _ in LOAD_COLUMNS]
            existing = self._columns(child.name)
            if existing and ORG_COLUMN not in existing:
                self._adopt_single_org(child.name)
                existing = self._columns(child.name)
            if not existing:
                self.conn.execute(f"CREATE TABLE {child.name} ({', '.join(f'{n} {t}' for n, t in wanted_child)})")
            for name, type_ in wanted_child:
                if existing and name not in existing:  # child tables made before they carried the load columns
                    self.conn.execute(f'ALTER TABLE {child.name} ADD COLUMN "{name}" {type_}')
        self._comment(spec)

    def _adopt_single_org(self, table: str) -> None:
        """Rebuild a table of a single-organization warehouse with `org` first (the organization `default`)."""
        columns = self._columns(table)
        quoted = ", ".join(f'"{name}"' for name in columns)
        self._rebuild(table, {ORG_COLUMN: "VARCHAR", **columns}, f"{sql_literal(DEFAULT_ORG)}, {quoted}")
        _logger.info(f"warehouse: {table} now carries {ORG_COLUMN}; its rows are organization {DEFAULT_ORG}'s")

    def _rebuild(self, table: str, columns: dict[str, str], select: str) -> None:
        """Replace `table` with a table of `columns` (name: type, no constraints) holding `select` of its
        rows, in one transaction."""
        definitions = ", ".join(f'"{name}" {type_}' for name, type_ in columns.items())
        with transaction(self.conn):
            self.conn.execute(f"CREATE TABLE _rebuilding ({definitions})")
            self.conn.execute(f"INSERT INTO _rebuilding SELECT {select} FROM {table}")
            self.conn.execute(f"DROP TABLE {table}")
            self.conn.execute(f"ALTER TABLE _rebuilding RENAME TO {table}")

    def _has_primary_key(self, table: str) -> bool:
        return bool(self.conn.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? "
                                      "AND constraint_type = 'PRIMARY KEY'", [table]).fetchall()[0][0])

    def merge(self, spec: TableSpec, source_relation: str, *, org: str, snapshot_date: str | None = None,
              changed_relation: str | None = None) -> int:
        """Merge organization `org`'s rows from `source_relation` (any SQL table expression with the
        schema's column names, e.g. a registered Arrow table or read_parquet(...)) into the spec's
        table, stamping `org` and the load columns: `_snapshot_date` (the lake snapshot the rows come
        from; NULL for rows no snapshot holds) and `_loaded_at`.

        One rule decides which version of a row is newer, between two incoming rows as between an
        incoming row and the table's: `spec.version`, compared field by field, a NULL on either side
        deferring to the next field (`_not_older`); when every field ties, the incoming row wins.
        A winning row whose content is the table's (same `_digest`) is left in place: only its
        `_snapshot_date` and receipt times move (a second night rewrites only what changed). Child
        tables are rebuilt for the ids written. Returns the number of rows written. Runs in one
        transaction: the one write path into current-state tables, nightly and incremental alike.

        A source carrying `_digest` (a lake snapshot, hashed as it was written) is compared by its
        narrow columns alone (ids, versions, receipt times, digests), and only the rows written are
        read whole; any other source is hashed here. An organization's first load inserts straight
        from the source. Ids that came twice are found by the comparison itself (the newest of each is
        kept, by the rule above), on a first load by counting them.

        `changed_relation`, rows of a lake snapshot's side file (resources/changed_rows.py: a subset of the
        source's rows, those that differ from the snapshot before), is where the rows written are read
        whole from when it holds them; the source only for those it lacks.
        """
        key = spec.key
        conn = self.conn
        this_org = f"{ORG_COLUMN} = {sql_literal(org)}"
        stamp = "NULL::DATE" if snapshot_date is None else f"DATE {sql_literal(snapshot_date)}"
        hashed = DIGEST_COLUMN in self._relation_columns(source_relation)

        def stamped(relation: str) -> str:
            return f"(SELECT {sql_literal(org)} AS {ORG_COLUMN}, *, {stamp} AS _snapshot_date, now() AS _loaded_at FROM {relation})"

        source = stamped(source_relation)
        self.read_from_changes = None
        with transaction(conn):
            if not self.count(spec.table, org):  # the organization's first load: every row is new, nothing to compare
                if conn.execute(f"SELECT count(*) - count(DISTINCT {key}) FROM {source}").fetchone()[0]:
                    source = self._newest_per_key(spec, source)
                written = self._with_digest(spec, source, hashed)
                conn.execute(f"CREATE OR REPLACE TEMP TABLE _merged_ids AS SELECT {key} AS id FROM {written}")
                inserted = conn.execute("SELECT count(*) FROM _merged_ids").fetchone()[0]
                counts = MergeCounts(int(inserted), 0, 0 if ARCHIVED_COLUMN in spec.schema.names else None)
            else:
                incoming = self._with_digest(spec, source, hashed)
                repeated = self._meet(spec, org, incoming)
                if repeated:  # an id came twice: the newest of each, then meet again
                    incoming = self._with_digest(spec, self._newest_per_key(spec, source), hashed)
                    self._meet(spec, org, incoming)
                written = f"(SELECT * FROM {incoming} WHERE {key} IN (SELECT id FROM _merged_ids))"
                if changed_relation is not None and hashed and not repeated:
                    written = self._written_from_changes(spec, incoming, stamped(changed_relation))
                counts = self._merge_counts(spec)
                self._observe_again(spec, org, stamp if snapshot_date is not None else None)
                conn.execute(f"DELETE FROM {spec.table} WHERE rowid IN (SELECT _row FROM _incoming WHERE written IS NOT NULL "
                             "AND _row IS NOT NULL)")
                conn.execute("DROP TABLE _incoming")
            conn.execute(f"INSERT INTO {spec.table} BY NAME SELECT * FROM {written}")
            for child in spec.children:
                self._rebuild_child(spec.table, child, org)
            count = conn.execute("SELECT count(*) FROM _merged_ids").fetchone()[0]
            conn.execute("DROP TABLE _merged_ids")
            conn.execute("DROP TABLE IF EXISTS _repeated; DROP TABLE IF EXISTS _beaten; DROP TABLE IF EXISTS _changed_ids")
        self.merge_counts = counts
        if self.touched is not None:
            keys = conn.sql(f"SELECT DISTINCT {key} FROM {source_relation}").to_arrow_table().column(0)
            self.touched.append(Touched(spec.table, key, tuple((c.name, c.parent_key) for c in spec.children), org, keys))
        return int(count)

    def _written_from_changes(self, spec: TableSpec, incoming: str, changed: str) -> str:
        """The rows to write (`_merged_ids`), read from the side file `changed` where it holds them, and from
        `incoming` only for the ids it lacks: the snapshot is not read whole when it holds them all."""
        key = spec.key
        self.conn.execute(f"CREATE OR REPLACE TEMP TABLE _changed_ids AS SELECT {key} AS id FROM {changed} "
                          f"WHERE {key} IN (SELECT id FROM _merged_ids)")
        from_changes = f"SELECT * FROM {changed} WHERE {key} IN (SELECT id FROM _changed_ids)"
        lacking = "SELECT id FROM _merged_ids WHERE id NOT IN (SELECT id FROM _changed_ids)"
        self.read_from_changes, lacks = self.conn.execute(
            f"SELECT (SELECT count(*) FROM _changed_ids), (SELECT count(*) FROM ({lacking}))").fetchone()
        if not lacks:
            return f"({from_changes})"
        return f"({from_changes} UNION ALL BY NAME SELECT * FROM {incoming} WHERE {key} IN ({lacking}))"

    @staticmethod
    def _with_digest(spec: TableSpec, source: str, hashed: bool) -> str:
        """`source` with its rows' `_digest`: carried (a lake snapshot's), or hashed here."""
        return source if hashed else f"(SELECT *, {row_digest(spec)} AS {DIGEST_COLUMN} FROM {source})"

    def _meet(self, spec: TableSpec, org: str, incoming: str) -> bool:
        """One join of the incoming rows' narrow columns (ids, versions, receipt times, digests) with the
        table's: TEMP TABLE `_incoming` holds, per incoming row, the table row it meets (`_row`, its rowid,
        which the updates of the merge keep), whether that row is seen again (not older: `seen`) and, when
        the incoming row is written (new, or not older and changed), its id (`written`); the receipt times
        ride along. TEMP TABLE `_merged_ids` holds the ids written. Returns whether an id came twice (the
        join is then to be made again with one row per id)."""
        key, this_org = spec.key, f"{ORG_COLUMN} = {sql_literal(org)}"
        not_older = _not_older(spec.version, "i", "t")
        archive = (ARCHIVED_COLUMN,) if ARCHIVED_COLUMN in spec.schema.names else ()
        narrow = (f"(SELECT {', '.join(dict.fromkeys((key, *spec.version, *receipt_columns(spec), *archive, DIGEST_COLUMN)))} "
                  f"FROM {incoming})")
        receipts = "".join(f", i.{name}" for name in receipt_columns(spec))
        receipts += "".join(f", i.{name} AS _archived_now, t.{name} AS _archived_before" for name in archive)
        changed = f"t.{key} IS NULL OR ({not_older} AND t.{DIGEST_COLUMN} IS DISTINCT FROM i.{DIGEST_COLUMN})"
        execute = self.conn.execute
        execute(f"CREATE OR REPLACE TEMP TABLE _incoming AS SELECT t._row, CASE WHEN {changed} THEN i.{key} END AS "
                f"written, t.{key} IS NOT NULL AND {not_older} AS seen{receipts} FROM {narrow} i "
                f"LEFT JOIN (SELECT rowid AS _row, * FROM {spec.table} WHERE {this_org}) t ON t.{key} = i.{key}")
        execute("CREATE OR REPLACE TEMP TABLE _merged_ids AS SELECT written AS id FROM _incoming WHERE written IS NOT NULL")
        # Cheaper than counting distinct ids: a table row met twice, or a new id (or a NULL one) twice.
        return bool(execute(
            "SELECT count(_row) - count(DISTINCT _row) + count(*) FILTER (WHERE _row IS NULL) "
            "- count(DISTINCT written) FILTER (WHERE _row IS NULL) FROM _incoming").fetchone()[0])

    def _merge_counts(self, spec: TableSpec) -> MergeCounts:
        """What the merge is about to write (`_incoming`, met by the table): new rows, replaced rows, and
        replaced rows archived now that were not."""
        archived = ("count(*) FILTER (WHERE written IS NOT NULL AND _row IS NOT NULL AND _archived_now "
                    "AND NOT coalesce(_archived_before, false))" if ARCHIVED_COLUMN in spec.schema.names else "NULL")
        inserted, updated, became = self.conn.execute(
            "SELECT count(*) FILTER (WHERE written IS NOT NULL AND _row IS NULL), "
            f"count(*) FILTER (WHERE written IS NOT NULL AND _row IS NOT NULL), {archived} FROM _incoming").fetchone()
        return MergeCounts(int(inserted), int(updated), None if became is None else int(became))

    def _observe_again(self, spec: TableSpec, org: str, stamp: str | None) -> None:
        """The table's rows seen again (`_incoming`: met by an incoming row not older) take the incoming row's
        receipt times (`spec.observed`: a row loaded later and observed earlier must still lose to them) and,
        given a snapshot's `stamp`, that snapshot date, they and their child rows. Rows about to be rewritten
        are among them: updated, then replaced."""
        this_org = f"{ORG_COLUMN} = {sql_literal(org)}"
        table, key = spec.table, spec.key
        later = "CASE WHEN {1}.{0} IS NULL OR i.{0} > {1}.{0} THEN i.{0} ELSE {1}.{0} END"  # the later receipt
        moved = [f"{name} = {later.format(name, table)}" for name in receipt_columns(spec)]
        moved += [f"_snapshot_date = {stamp}"] if stamp else []
        if not moved:
            return
        self.conn.execute(f"UPDATE {table} SET {', '.join(moved)} FROM _incoming i WHERE {table}.rowid = i._row AND i.seen")
        for child in spec.children if stamp else ():
            self.conn.execute(
                f"UPDATE {child.name} SET _snapshot_date = {stamp} WHERE {this_org} AND _snapshot_date IS DISTINCT "
                f"FROM {stamp} AND {child.parent_key} IN (SELECT {key} FROM {table} WHERE {this_org} AND _snapshot_date = {stamp})"
            )

    def _newest_per_key(self, spec: TableSpec, source: str) -> str:
        """`source` with one row per key: the row no other row of its key is newer than by `_not_older`
        (the rule the merge applies against the table). Should the rule go round in a circle (it can,
        with NULLs deferring), the row observed last by the version's final field wins."""
        key, conn = spec.key, self.conn
        conn.execute(
            f"CREATE OR REPLACE TEMP TABLE _repeated AS SELECT *, row_number() OVER () AS _row FROM {source} "
            f"WHERE {key} IN (SELECT {key} FROM {source} GROUP BY {key} HAVING count(*) > 1)"
        )
        conn.execute(
            f"CREATE OR REPLACE TEMP TABLE _beaten AS SELECT DISTINCT r._row FROM _repeated r JOIN _repeated o "
            f"ON o.{key} = r.{key} AND o._row <> r._row WHERE NOT {_not_older(spec.version, 'r', 'o')}"
        )
        last = f"{spec.version[-1]} DESC NULLS LAST, " if spec.version else ""
        winners = (
            f"SELECT _row FROM (SELECT _row, row_number() OVER (PARTITION BY {key} ORDER BY beaten, {last}_row DESC) AS rank "
            f"FROM (SELECT *, _row IN (SELECT _row FROM _beaten) AS beaten FROM _repeated)) WHERE rank = 1"
        )
        return (
            f"(SELECT * FROM {source} WHERE {key} NOT IN (SELECT {key} FROM _repeated) "
            f"UNION ALL BY NAME SELECT * EXCLUDE (_row) FROM _repeated WHERE _row IN ({winners}))"
        )

    def replace_table(
        self, table: str, source_relation: str, schema: pa.Schema, comment: str, more_columns: dict[str, str] | None = None
    ) -> None:
        """Replace `table` with `source_relation` in one transaction (a snapshot table, no row versions to
        keep), commented from the Arrow schema's descriptions plus `more_columns` {name: comment}."""
        with transaction(self.conn):
            self.conn.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM {source_relation}")
            self.conn.execute(f"COMMENT ON TABLE {table} IS {sql_literal(comment)}")
            comments = {f.name: description(f) for f in schema} | (more_columns or {})
            for name, text in comments.items():
                self.conn.execute(f'COMMENT ON COLUMN {table}."{name}" IS {sql_literal(text)}')

    def exists(self, table: str) -> bool:
        return bool(self._columns(table))

    def ensure_history_view(self, spec: TableSpec, relative_glob: str) -> None:
        """`<table>_history`: every lake snapshot, with its snapshot_date. The path is relative to the
        data directory, so the data directory can move; DuckDB resolves it against the connection's
        `file_search_path` (or the working directory), which readers set to the data directory."""
        self.conn.execute(
            f"CREATE OR REPLACE VIEW {spec.history_view} AS SELECT * FROM read_parquet("
            f"{sql_literal(relative_glob)}, hive_partitioning = true, union_by_name = true)"
        )
        self.conn.execute(
            f"COMMENT ON VIEW {spec.history_view} IS "
            f"{sql_literal(f'Every lake snapshot of {spec.table}, one row per id per snapshot_date (reads the Parquet files of the lake)')}"
        )
        for f in spec.schema:
            self.conn.execute(f'COMMENT ON COLUMN {spec.history_view}."{f.name}" IS {sql_literal(description(f))}')
        if DIGEST_COLUMN in self._columns(spec.history_view):  # snapshots written before digests lack it
            self.conn.execute(f'COMMENT ON COLUMN {spec.history_view}."{DIGEST_COLUMN}" IS {sql_literal(DIGEST_COMMENT)}')
        self.conn.execute(f"COMMENT ON COLUMN {spec.history_view}.snapshot_date IS 'Snapshot date (lake folder)'")
        self.conn.execute(f"COMMENT ON COLUMN {spec.history_view}.{ORG_COLUMN} IS {sql_literal(ORG_COMMENT + ' (lake folder)')}")

    def count(self, table: str, org: str | None = None) -> int:
        """Rows of `table`, of one organization when `org` is given."""
        where = "" if org is None else f" WHERE {ORG_COLUMN} = {sql_literal(org)}"
        return int(self.conn.execute(f"SELECT count(*) FROM {table}{where}").fetchone()[0])

    def _relation_columns(self, relation: str) -> list[str]:
        return [row[0] for row in self.conn.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()]

    def _columns(self, table: str) -> dict[str, str]:
        rows = self.conn.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ?",
            [table],
        ).fetchall()
        return dict(rows)

    def _rebuild_child(self, parent: str, child: ChildSpec, org: str) -> None:
        """The child rows of the ids written, with their parent row's org and load columns."""
        this_org = f"{ORG_COLUMN} = {sql_literal(org)}"
        self.conn.execute(
            f"DELETE FROM {child.name} WHERE {this_org} AND {child.parent_key} IN (SELECT id FROM _merged_ids)"
        )
        names = [name for name, _, _ in child.columns]
        carried = [ORG_COLUMN] + [name for name, _, _ in LOAD_COLUMNS]
        written = f"(SELECT * FROM {parent} WHERE {this_org} AND id IN (SELECT id FROM _merged_ids))"
        self.conn.execute(
            f"INSERT INTO {child.name} ({', '.join(carried + names)}) "
            f"SELECT {', '.join(f'parent.{name}' for name in carried)}, c.* "
            f"FROM ({child.select_sql.format(parents=written)}) AS c({', '.join(names)}) "
            f"JOIN {written} parent ON parent.id = c.{child.parent_key}"
        )

    def _comment(self, spec: TableSpec) -> None:
        """Comment the table, its children and their columns; only the comments that differ are written (each
        is a catalog change, and an unchanged table is ensured every night)."""
        wanted = {(spec.table, None): spec.description}
        wanted |= {(spec.table, f.name): description(f) for f in spec.schema}
        wanted |= {(spec.table, name): text for name, _, text in LOAD_COLUMNS}
        wanted |= {(spec.table, ORG_COLUMN): ORG_COMMENT, (spec.table, DIGEST_COLUMN): DIGEST_COMMENT}
        for child in spec.children:
            wanted[(child.name, None)] = child.description
            wanted[(child.name, ORG_COLUMN)] = ORG_COMMENT
            wanted |= {(child.name, name): text for name, _, text in child.columns}
            wanted |= {(child.name, name): text + " (of the parent row)" for name, _, text in LOAD_COLUMNS}
        tables = [spec.table, *(child.name for child in spec.children)]
        present = dict(((table, None), comment) for table, comment in self.conn.execute(
            "SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'main' AND list_contains(?, table_name)",
            [tables]).fetchall())
        present |= {(table, column): comment for table, column, comment in self.conn.execute(
            "SELECT table_name, column_name, comment FROM duckdb_columns() "
            "WHERE schema_name = 'main' AND list_contains(?, table_name)", [tables]).fetchall()}
        changed = [(table, column, text) for (table, column), text in wanted.items()
                   if present.get((table, column)) != text]
        if not changed:
            return
        with transaction(self.conn):  # one commit, not one per comment: a new table has dozens
            for table, column, text in changed:
                target = f"TABLE {table}" if column is None else f'COLUMN {table}."{column}"'
                self.conn.execute(f"COMMENT ON {target} IS {sql_literal(text)}")


def row_digest(spec: TableSpec) -> str:
    """SQL: the row's digest (resources/digest.py), as the lake writes it."""
    return digest_sql(content_fields(spec.schema, spec.observed))


def receipt_columns(spec: TableSpec) -> tuple[str, ...]:
    """The table's columns recording when a row was received (`spec.observed` it has)."""
    return tuple(name for name in spec.observed if name in spec.schema.names)


def _not_older(version: tuple[str, ...], incoming: str, existing: str) -> str:
    """SQL: the incoming row's version is not older than the existing row's."""
    if not version:
        return "true"
    first, rest = version[0], version[1:]
    a, b = f"{incoming}.{first}", f"{existing}.{first}"
    return f"(CASE WHEN {a} IS NULL OR {b} IS NULL OR {a} = {b} THEN {_not_older(rest, incoming, existing)} ELSE {a} > {b} END)"


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file, its writer lock and the analysts' published copy."""

    data_dir: str
    memory_limit: str = "128MB"  # DuckDB spills beyond it: keeps the sync process small
    # One: merges run beside the fetch and leave it the other core, and an insert keeps a row group per
    # thread in memory (with two, a second night of 1M signals, every row changed, runs out of 128 MB).
    threads: int = 1
    # A merge no fetch runs beside (the run's last list's, after its last page: the run waits for it): both
    # cores, in the same memory (1M KOLs: 2.6-2.8 s after the last page against 3.7-4.1 s on one thread,
    # benchmarks/nightly_sync.py --scale 10); where that is too little, the merge runs again on `threads`.
    merge_alone_threads: int = 2
    merge_alone_memory_limit: str = "128MB"
    # The CRM reconciliation runs in its own job, after the nightly: both cores and room for its joins
    # (1M KOLs x 1M contacts: 26 s and 1.4 GB at these settings, benchmarks/crm_matching.py scale).
    reconcile_threads: int = 2
    reconcile_memory_limit: str = "1GB"
    # Rows per row group in what this resource's sessions write (DuckDB's default: 122,880). An insert writes
    # each full group out as it fills, on every thread; the last, partial group is compressed in the COMMIT,
    # on one. At the default a first night of 100k KOLs is all one partial group: 0.46 s on two threads,
    # against 0.19 s at this size (docs/pipeline.md#row-groups).
    row_group_size: int = 32_768
    _background: BackgroundWriter | None = PrivateAttr(default=None)  # the run's (setup_for_execution)
    _writes: list[Write] = PrivateAttr(default_factory=list)  # this resource's writer sessions since its last publish
    _last_publish: str = PrivateAttr(default="")

    @property
    def path(self) -> Path:
        return Path(self.data_dir) / WAREHOUSE_FILE

    @property
    def analytics_path(self) -> Path:
        return Path(self.data_dir) / ANALYTICS_FILE

    def read_published(self, table: str, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """The rows of `sql` over the published analytics.duckdb, opened read-only: no writer lock, no wait
        for a sync; [] while nothing is published or `table` is not there yet. The copy may trail the
        warehouse by one unpublished write, never lead it."""
        if not self.analytics_path.exists():
            return []
        conn = duckdb.connect(str(self.analytics_path), read_only=True)
        try:
            if not conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchone()[0]:
                return []
            return conn.execute(sql, list(params)).fetchall()
        finally:
            conn.close()

    @property
    def lock_path(self) -> Path:
        return Path(self.data_dir) / LOCK_FILE

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.remove_abandoned_copies()
        self._background = BackgroundWriter()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._background is not None:
            self._background.close()

    @property
    def background(self) -> BackgroundWriter | None:
        """The run's background writer: merges handed to it run beside the next list's fetch, one at a
        time, each in its own `writer()` session (the same lock, memory limit and transaction). None
        outside a run, where every merge runs in its step."""
        return self._background

    def remove_abandoned_copies(self) -> None:
        """Half-written analytics copies of processes that died (a sync killed while publishing)."""
        remove_abandoned(Path(self.data_dir), f".{ANALYTICS_FILE}.*.tmp")

    @contextmanager
    def writer(self, log: Any = None, *, threads: int | None = None, memory_limit: str | None = None,
               track: bool = False) -> Iterator[WarehouseSession]:
        """Exclusive read-write session; the file is checkpointed and closed when it ends. `threads` and
        `memory_limit` replace the resource's for this session (the reconciliation's). `track`: the session
        records the keys its merges meet, so the next publish may copy only those rows."""
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        with self._exclusive_lock(log):
            write = Write(FileState.of(self.path), touched=[] if track else None)
            try:
                with self._session(threads=threads, memory_limit=memory_limit) as conn:
                    yield WarehouseSession(conn, write.touched)
                    _checkpoint(conn)
            finally:
                write.after = FileState.of(self.path)  # the file closed: the session's detached it
                self._writes.append(write)

    def publish_analytics(self, log: Any = None) -> Path:
        """Copy the warehouse to analytics.duckdb atomically (under the writer lock, so no write is
        half in the copy), with the last good marts' tables added (resources/marts.py). An analyst holding
        the old analytics.duckdb keeps reading the old inode undisturbed; a new connection opens the new file.

        When this resource's writes since the last publish all recorded what they touched, and nothing else
        changed the warehouse or the marts since, the published copy with those rows replaced is the same
        file for less: that is what is copied (resources/published_changes.py). `last_publish` says which."""
        writes, self._writes = self._writes, []

        def copy(temp: Path) -> None:
            if in_step(self.analytics_path, writes, FileState.of(self.path), FileState.of(self._marts_path)):
                try:
                    self._copy_published(temp, lambda conn: apply_touched(conn, WAREHOUSE_DATABASE, writes))
                    touched = {t.table for write in writes for t in write.touched or ()}
                    self._last_publish = f"changed rows of {len(touched)} table(s)"
                    return
                except NotInStep as table:
                    _info(log, f"analytics.duckdb lacks the warehouse's {table} as it stands: publishing the whole copy")
                    temp.unlink(missing_ok=True)
            if not self.path.exists():  # nothing written yet: publish an empty warehouse
                with self._session():
                    pass
            shutil.copyfile(self.path, temp)
            self._add_marts(temp)
            self._last_publish = "whole warehouse"

        self._replace_published(copy, log, record=True)
        return self.analytics_path

    @property
    def last_publish(self) -> str:
        """What this resource's last publish copied: the whole warehouse, or the rows its writes changed."""
        return self._last_publish

    @property
    def _marts_path(self) -> Path:
        return Path(self.data_dir) / MARTS_FILE

    def amend_published(self, amend: Callable[[duckdb.DuckDBPyConnection], None], log: Any = None) -> bool:
        """analytics.duckdb as published, changed by `amend` (given a connection to a copy of it, the warehouse
        attached read-only as `warehouse`) and replaced atomically under the writer lock, like a publish: for
        what must reach analysts without publishing the warehouse as it stands. False when nothing is published."""
        if not self.analytics_path.exists():
            return False
        self._replace_published(lambda temp: self._copy_published(temp, amend), log, record=False)
        return True

    def _copy_published(self, temp: Path, amend: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        """At `temp`, analytics.duckdb as published, changed by `amend` (the warehouse attached read-only)."""
        shutil.copyfile(self.analytics_path, temp)
        conn = duckdb.connect(str(temp), config={"memory_limit": self.memory_limit, "threads": self.threads})
        try:
            conn.execute(f"ATTACH {sql_literal(str(self.path))} AS {WAREHOUSE_DATABASE} (READ_ONLY)")
            amend(conn)
            conn.execute(f"DETACH {WAREHOUSE_DATABASE}")
            conn.execute("CHECKPOINT")
        finally:
            conn.close()

    def _replace_published(self, write: Callable[[Path], None], log: Any, *, record: bool) -> None:
        """analytics.duckdb replaced by the file `write` makes at a temporary path, under the writer lock.
        `record`: the new copy is the warehouse and the marts as they stand, and says so beside it (else the
        record is removed: the next publish copies the whole warehouse)."""
        temp = self.analytics_path.with_name(f".{ANALYTICS_FILE}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        with self._exclusive_lock(log):
            try:
                write(temp)
                with open(temp, "rb") as handle:
                    os.fsync(handle.fileno())
                sidecar(self.analytics_path).unlink(missing_ok=True)
                os.replace(temp, self.analytics_path)
                if record:
                    record_source(self.analytics_path, FileState.of(self.path), FileState.of(self._marts_path))
            finally:
                temp.unlink(missing_ok=True)

    def _add_marts(self, copy: Path) -> None:
        marts = self._marts_path
        if not marts.exists():
            return
        conn = duckdb.connect(str(copy), config={"memory_limit": self.memory_limit, "threads": self.threads})
        try:
            copy_marts_into(conn, marts)
            conn.execute("CHECKPOINT")
        finally:
            conn.close()

    @contextmanager
    def locked(self, log: Any = None) -> Iterator[None]:
        """The writer lock alone, for a process that reads or replaces the warehouse file itself (the marts' copy
        for dbt, an erasure's rebuild): no sync writes meanwhile, and it never finds the file open. A holder is
        waited for, and `log` told."""
        with self._exclusive_lock(log):
            yield

    @contextmanager
    def _session(self, *, threads: int | None = None,
                 memory_limit: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        # Attached, not opened, for its row group size (an option of ATTACH only), under the name opening the
        # file gives it; to the process's database of this configuration (resources/process_databases.py).
        with attached(str(self.path), WAREHOUSE_DATABASE, f"(ROW_GROUP_SIZE {self.row_group_size})",
                      memory_limit=memory_limit or self.memory_limit, threads=threads or self.threads,
                      file_search_path=self.data_dir) as conn:
            conn.execute("SET preserve_insertion_order = false")
            yield conn

    @contextmanager
    def _exclusive_lock(self, log: Any) -> Iterator[None]:
        waited_from = None

        def waiting(holder: str) -> None:
            nonlocal waited_from
            who = "this run's background writer" if holder == f"pid {os.getpid()}" else "another sync"
            _info(log, f"Waiting for the warehouse lock {self.lock_path} (held by {holder}): {who} is writing")
            waited_from = time.monotonic()

        with holding_lock(Path(self.lock_path), on_wait=waiting):
            if waited_from is not None:
                _info(log, f"Got the warehouse lock after {time.monotonic() - waited_from:.1f}s")
            yield


CHECKPOINT_WAIT_SECONDS = 30.0


def _checkpoint(conn: duckdb.DuckDBPyConnection) -> None:
    """CHECKPOINT the session's file. DuckDB refuses one while another connection of the process's database has
    a write transaction open on it; such a transaction is waited for (up to CHECKPOINT_WAIT_SECONDS), as the
    file must be whole when the writer lock is let go: the next reader may copy it without its WAL."""
    deadline = time.monotonic() + CHECKPOINT_WAIT_SECONDS
    while True:
        try:
            conn.execute("CHECKPOINT")
            return
        except duckdb.TransactionException as error:
            if "other write transactions" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _info(log: Any, message: str) -> None:
    _logger.info(message)
    if log is not None:
        log.info(message)
