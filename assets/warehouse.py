"""Warehouse assets: the lake snapshot of a date merged into DuckDB current-state tables.

Per catalog resource: a table with one row per id (the newer version wins, see `merge_rows`),
its child tables rebuilt for the ids the merge touched, a `<name>_history`
view over every snapshot in the lake, and comments on every table and column.
`merge_rows` is the one write path into current-state tables (later: webhook updates).
"""


import time
from typing import Any

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from assets import checks
from assets.catalog import CATALOG, ChildTable, ResourceSpec
from assets.lake import SNAPSHOT_FILE
from assets.metadata import markdown_preview
from assets.snapshot_date import snapshot_date as run_snapshot_date
from assets.schemas import description
from assets.sql import read_parquet, sql_literal
from resources.warehouse import LakeResource, WarehouseResource

LOAD_COLUMNS = (
    ("_snapshot_date", "DATE", "Snapshot date (the day the run read it) of the snapshot the row was last loaded from"),
    ("_loaded_at", "TIMESTAMPTZ", "Time the sync wrote this version of the row (UTC)"),
)


def _table_columns(conn: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ?",
        [table],
    ).fetchall()
    return dict(rows)


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


def ensure_table(conn: duckdb.DuckDBPyConnection, spec: ResourceSpec) -> None:
    """Create the current-state table (and its children) from the Arrow schema; add new columns."""
    wanted = {f.name: duckdb_type(f.type) for f in spec.schema}
    wanted.update({name: type_ for name, type_, _ in LOAD_COLUMNS})
    existing = _table_columns(conn, spec.table)
    if not existing:
        columns = ", ".join(f'"{name}" {type_}' for name, type_ in wanted.items())
        conn.execute(f"CREATE TABLE {spec.table} ({columns}, PRIMARY KEY ({spec.key}))")
    else:
        for name, type_ in wanted.items():
            if name not in existing:
                conn.execute(f'ALTER TABLE {spec.table} ADD COLUMN "{name}" {type_}')
    for child in spec.children:
        columns = ", ".join(f"{name} {type_}" for name, type_, _ in child.columns)
        conn.execute(f"CREATE TABLE IF NOT EXISTS {child.name} ({columns})")
    _comment(conn, spec)


def _comment(conn: duckdb.DuckDBPyConnection, spec: ResourceSpec) -> None:
    conn.execute(f"COMMENT ON TABLE {spec.table} IS {sql_literal(spec.description)}")
    for f in spec.schema:
        conn.execute(f'COMMENT ON COLUMN {spec.table}."{f.name}" IS {sql_literal(description(f))}')
    for name, _, text in LOAD_COLUMNS:
        conn.execute(f'COMMENT ON COLUMN {spec.table}."{name}" IS {sql_literal(text)}')
    for child in spec.children:
        conn.execute(f"COMMENT ON TABLE {child.name} IS {sql_literal(child.description)}")
        for name, _, text in child.columns:
            conn.execute(f"COMMENT ON COLUMN {child.name}.{name} IS {sql_literal(text)}")


def merge_rows(conn: duckdb.DuckDBPyConnection, spec: ResourceSpec, source_relation: str) -> int:
    """Merge rows from `source_relation` (any SQL table expression with the table's column
    names, e.g. a registered Arrow table or read_parquet(...)) into the spec's table.

    Per id the newer version wins (`spec.version`, compared field by field, a NULL on either
    side deferring to the next field); when every field ties, the incoming row wins. Child
    tables are rebuilt for the ids written. Returns the number of rows written. Runs in one
    transaction.
    """
    key = spec.key
    newest_first = ", ".join(f"{f} DESC NULLS LAST" for f in spec.version)
    conn.execute("BEGIN TRANSACTION")
    try:
        source = f"(SELECT * FROM {source_relation})"
        if conn.execute(f"SELECT count(*) - count(DISTINCT {key}) FROM {source}").fetchone()[0]:
            source = (
                f"(SELECT * FROM {source_relation} "
                f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {newest_first}) = 1)"
            )
        # Only ids and timestamps are compared; the wide rows stream from the source once.
        conn.execute(
            f"CREATE OR REPLACE TEMP TABLE _merged_ids AS SELECT i.{key} AS id FROM {source} i "
            f"LEFT JOIN {spec.table} t ON t.{key} = i.{key} "
            f"WHERE t.{key} IS NULL OR {_not_older(spec.version, 'i', 't')}"
        )
        conn.execute(f"DELETE FROM {spec.table} WHERE {key} IN (SELECT id FROM _merged_ids)")
        conn.execute(
            f"INSERT INTO {spec.table} BY NAME SELECT i.* FROM {source} i "
            f"WHERE i.{key} IN (SELECT id FROM _merged_ids)"
        )
        for child in spec.children:
            _rebuild_child(conn, child)
        written = conn.execute("SELECT count(*) FROM _merged_ids").fetchone()[0]
        conn.execute("DROP TABLE _merged_ids")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(written)


def _not_older(version: tuple[str, ...], incoming: str, existing: str) -> str:
    """SQL: the incoming row's version is not older than the existing row's."""
    if not version:
        return "true"
    first, rest = version[0], version[1:]
    a, b = f"{incoming}.{first}", f"{existing}.{first}"
    return f"(CASE WHEN {a} IS NULL OR {b} IS NULL OR {a} = {b} THEN {_not_older(rest, incoming, existing)} ELSE {a} > {b} END)"


def _rebuild_child(conn: duckdb.DuckDBPyConnection, child: ChildTable) -> None:
    conn.execute(f"DELETE FROM {child.name} WHERE {child.parent_key} IN (SELECT id FROM _merged_ids)")
    columns = ", ".join(name for name, _, _ in child.columns)
    conn.execute(
        f"INSERT INTO {child.name} ({columns}) {child.select_sql} WHERE p.id IN (SELECT id FROM _merged_ids)"
    )


def ensure_history_view(conn: duckdb.DuckDBPyConnection, spec: ResourceSpec, lake: LakeResource) -> None:
    """`<name>_history`: every snapshot of the lake, with its snapshot_date."""
    conn.execute(
        f"CREATE OR REPLACE VIEW {spec.history_view} AS SELECT * FROM read_parquet("
        f"{sql_literal(lake.glob(spec.name))}, hive_partitioning = true, union_by_name = true)"
    )
    conn.execute(
        f"COMMENT ON VIEW {spec.history_view} IS "
        f"{sql_literal(f'Every lake snapshot of {spec.name}, one row per id per snapshot_date (reads the Parquet files)')}"
    )
    for f in spec.schema:
        conn.execute(f'COMMENT ON COLUMN {spec.history_view}."{f.name}" IS {sql_literal(description(f))}')
    conn.execute(
        f"COMMENT ON COLUMN {spec.history_view}.snapshot_date IS 'Snapshot date (lake partition)'"
    )


def load(
    context: dg.AssetExecutionContext, spec: ResourceSpec, lake: LakeResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    snapshot_date = run_snapshot_date(context)
    path = lake.snapshot_dir(spec.name, snapshot_date) / SNAPSHOT_FILE
    if not path.exists():
        raise FileNotFoundError(f"No {spec.name} snapshot for {snapshot_date} at {path}: materialize lake/{spec.name} first")
    snapshot = read_parquet(path)
    started = time.monotonic()
    with warehouse.writer(context.log) as conn:
        ensure_table(conn, spec)
        written = merge_rows(
            conn,
            spec,
            f"(SELECT *, DATE {sql_literal(snapshot_date)} AS _snapshot_date, now() AS _loaded_at FROM {snapshot})",
        )
        ensure_history_view(conn, spec, lake)
        check_results = checks.run_warehouse_checks(conn, spec, snapshot)
        rows = conn.execute(f"SELECT count(*) FROM {spec.table}").fetchone()[0]
        children = {
            f"rows_{child.name}": conn.execute(f"SELECT count(*) FROM {child.name}").fetchone()[0]
            for child in spec.children
        }
        preview = markdown_preview(conn, spec.table, [f.name for f in spec.schema][:4])
    context.log.info(f"warehouse {spec.table}: {written} rows written, {rows} rows in table")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "rows_written": written,
            "rows_kept_newer_in_table": _count_rows(path) - written,
            **children,
            "duration_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3)),
            "table": spec.table,
            "warehouse": dg.MetadataValue.path(str(warehouse.path)),
            "preview": dg.MetadataValue.md(preview),
        },
        check_results=check_results,
    )


def _count_rows(path: Any) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def build_table_asset(spec: ResourceSpec) -> dg.AssetsDefinition:
    key = dg.AssetKey(["warehouse", spec.name])
    deps = [dg.AssetKey(["lake", spec.name])]
    if spec.product_refs:
        deps.append(dg.AssetKey(["warehouse", "products"]))  # so the reference check sees today's products

    @dg.asset(
        key=key,
        deps=deps,
        group_name="warehouse",
        kinds={"duckdb"},
        pool="warehouse",
        check_specs=checks.warehouse_check_specs(spec, key),
        description=f"DuckDB table {spec.table}: {spec.description}",
        metadata={"table": spec.table, "children": ", ".join(c.name for c in spec.children) or "none"},
    )
    def _table(context: dg.AssetExecutionContext, lake: LakeResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
        return load(context, spec, lake, warehouse)

    return _table


TABLE_ASSETS = [build_table_asset(spec) for spec in CATALOG]
