"""The sync's own health as warehouse tables: `sync_runs` (one row per nightly run and organization),
`table_loads` (one per run, organization and table) and the view `data_as_of` over them.

Rows are appended once per run and never replaced (a run already recorded is left as it is). They are
written into the warehouse under its writer lock and reach analytics.duckdb with its publish; a run that
failed publishes nothing else, so `publish_health` gives analysts a copy of the last published file with
the new health rows appended (the same atomic rename: analysts are never locked out, and never see a
failed run's partial tables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb

from resources.sql import sql_literal, transaction
from resources.warehouse import ORG_COMMENT, WAREHOUSE_DATABASE, WarehouseResource

SYNC_RUNS = "sync_runs"
TABLE_LOADS = "table_loads"
DATA_AS_OF = "data_as_of"

LANDED = "landed"
FAILED = "failed"
BLOCKED = "blocked by checks"
SKIPPED = "skipped"

_COMMON = (
    ("run_id", "VARCHAR", "Dagster run id (the run in the Dagster UI: /runs/<run_id>)"),
    ("org", "VARCHAR", ORG_COMMENT),
    ("snapshot_date", "DATE", "Snapshot date of the run (the day it read the API, COMMOPS_TIMEZONE)"),
)
_ROW_COUNTS = (
    ("rows_inserted", "BIGINT", "Rows new to the warehouse table"),
    ("rows_updated", "BIGINT", "Rows whose content changed, written over the table's version"),
    ("rows_unchanged", "BIGINT", "Rows of the snapshot the table already held as they are (or newer)"),
    ("rows_archived", "BIGINT", "Rows written archived (is_archived true) that the table held as not archived; "
                                "NULL for tables without archival"),
)
_REQUESTS = (
    ("requests", "BIGINT", "HTTP requests sent to the API, retries and rate-limited attempts included"),
    ("responses_429", "BIGINT", "429 (rate limited) answers met"),
    ("retries", "BIGINT", "Requests repeated after a transient failure (5xx, timeout, dropped connection)"),
    ("throttled_seconds", "DOUBLE", "Seconds spent waiting for the API's rate limit (pacing and 429s)"),
)
_QUALITY = (
    ("rows_in_flux", "BIGINT", "Rows created or archived in the service while its lists were paged"),
    ("unreadable_values", "BIGINT", "Values whose type did not fit their field, kept raw in _extra"),
)

SYNC_RUNS_COLUMNS = (
    *_COMMON,
    ("started_at", "TIMESTAMPTZ", "When the run started (UTC)"),
    ("ended_at", "TIMESTAMPTZ", "When the run ended; for a landed run, when its rows were recorded, just "
                                "before analytics.duckdb was published"),
    ("duration_seconds", "DOUBLE", "ended_at - started_at, in seconds"),
    ("outcome", "VARCHAR", "landed (published to analytics.duckdb), failed, or blocked by checks (a blocking "
                           "check failed: its table was not loaded, nothing was published)"),
    ("failed_steps", "VARCHAR", "The steps and blocking checks that failed, comma-separated; NULL when it landed"),
    ("warned_checks", "VARCHAR", "The non-blocking (WARN) checks that failed, asset:check comma-separated; NULL when none"),
    ("tables_landed", "INTEGER", "Tables of the run loaded into the warehouse (table_loads with outcome landed)"),
    *_REQUESTS,
    *_ROW_COUNTS,
    *_QUALITY,
    ("new_fields", "INTEGER", "Fields outside the spec seen for the first time, over all tables (table_loads.new_fields)"),
    ("recorded_at", "TIMESTAMPTZ", "When this row was written"),
)
TABLE_LOADS_COLUMNS = (
    *_COMMON,
    ("table_name", "VARCHAR", "Warehouse table loaded (kols, campaigns, products, signals)"),
    ("as_of", "TIMESTAMPTZ", "When the snapshot's listing started: every change the service made before it is in "
                             "the snapshot (NULL when the snapshot was not taken)"),
    ("outcome", "VARCHAR", "landed (merged into the warehouse), blocked by checks (a blocking check of its "
                           "snapshot failed), failed (its fetch or merge failed) or skipped (not run: a step it "
                           "waits for failed)"),
    ("rows_snapshot", "BIGINT", "Rows in the night's snapshot (what the API listed)"),
    ("rows_total", "BIGINT", "Rows of the organization in the warehouse table after the load"),
    *_ROW_COUNTS,
    *_REQUESTS,
    *_QUALITY,
    ("extra_fields", "MAP(VARCHAR, BIGINT)", "Top-level fields the API returned that the spec does not name "
                                             "(kept in _extra), with the number of rows carrying each"),
    ("new_fields", "MAP(VARCHAR, BIGINT)", "Those of extra_fields never seen in an earlier load of this "
                                           "organization and table, with their row counts"),
    ("duration_seconds", "DOUBLE", "Seconds from the listing's start to the snapshot's publish, plus the merge's"),
)
_TABLES = {
    SYNC_RUNS: ("Sync health: one row per nightly sync run and organization, failed runs included; appended, "
                "never replaced", SYNC_RUNS_COLUMNS),
    TABLE_LOADS: ("Sync health: one row per nightly sync run, organization and table; appended, never replaced",
                  TABLE_LOADS_COLUMNS),
}
_AS_OF_COMMENTS = {
    "org": ORG_COMMENT,
    "table_name": "Warehouse table",
    "as_of": "The table's rows reflect the service as of this time (when the last landed run started listing it); "
             "webhooks may have brought some rows further since",
    "snapshot_date": "Snapshot date of that load",
    "run_id": "Dagster run that loaded it",
}


def ensure_health_tables(conn: duckdb.DuckDBPyConnection) -> None:
    """Create the health tables and the `data_as_of` view where missing, commented; add the columns a table
    made earlier lacks."""
    present: dict[str, set[str]] = {}
    for table, column in conn.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main' "
                                      "AND list_contains(?, table_name)", [list(_TABLES)]).fetchall():
        present.setdefault(table, set()).add(column)
    for table, (comment, columns) in _TABLES.items():
        if table not in present:
            conn.execute(f"CREATE TABLE {table} ({', '.join(f'{name} {type_}' for name, type_, _ in columns)})")
            conn.execute(f"COMMENT ON TABLE {table} IS {sql_literal(comment)}")
        for name, type_, text in columns:
            if table in present and name in present[table]:
                continue
            if table in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {type_}")
            conn.execute(f"COMMENT ON COLUMN {table}.{name} IS {sql_literal(text)}")
    if not conn.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [DATA_AS_OF]).fetchone()[0]:
        # Loads of runs that landed (published) only: a failed run may have merged some tables, which
        # analysts see only once a later publish carries them (the view then understates, never overstates).
        conn.execute(
            f"CREATE VIEW {DATA_AS_OF} AS SELECT l.org, l.table_name, max(l.as_of) AS as_of, "
            f"arg_max(l.snapshot_date, l.as_of) AS snapshot_date, arg_max(l.run_id, l.as_of) AS run_id "
            f"FROM {TABLE_LOADS} l JOIN {SYNC_RUNS} r ON r.run_id = l.run_id AND r.org IS NOT DISTINCT FROM l.org "
            f"WHERE l.outcome = {sql_literal(LANDED)} AND r.outcome = {sql_literal(LANDED)} GROUP BY l.org, l.table_name")
        conn.execute(f"COMMENT ON VIEW {DATA_AS_OF} IS 'Per organization and table: the time its rows reflect "
                     "(the last nightly run that landed and published it)'")
        for name, text in _AS_OF_COMMENTS.items():
            conn.execute(f"COMMENT ON COLUMN {DATA_AS_OF}.{name} IS {sql_literal(text)}")


def recorded(conn: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return bool(conn.execute(f"SELECT count(*) FROM {SYNC_RUNS} WHERE run_id = ?", [run_id]).fetchone()[0])


def append_run(conn: duckdb.DuckDBPyConnection, run: Mapping[str, Any], loads: Sequence[Mapping[str, Any]]) -> bool:
    """Append a run's row and its tables' rows in one transaction; False (nothing written) when the run is
    already recorded."""
    ensure_health_tables(conn)
    with transaction(conn):
        if recorded(conn, run["run_id"]):
            return False  # nothing written: the empty transaction commits
        _insert(conn, SYNC_RUNS, SYNC_RUNS_COLUMNS, [run])
        _insert(conn, TABLE_LOADS, TABLE_LOADS_COLUMNS, loads)
    return True


def _insert(conn: duckdb.DuckDBPyConnection, table: str, columns: Sequence[tuple[str, str, str]],
            rows: Sequence[Mapping[str, Any]]) -> None:
    if not rows:
        return
    names = [name for name, _, _ in columns]
    values = ", ".join(f"?::{type_}" for _, type_, _ in columns)
    conn.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({values})",
                     [[_plain(row.get(name)) for name in names] for row in rows])


def _plain(value: Any) -> Any:
    """Maps as DuckDB takes them from Python ({'key': [...], 'value': [...]})."""
    if isinstance(value, Mapping):
        return {"key": list(value), "value": list(value.values())}
    return value


def recent_snapshot_rows(conn: duckdb.DuckDBPyConnection, org: str, table: str, loads: int) -> list[int]:
    """`rows_snapshot` of the organization's last `loads` landed loads of `table`, newest first."""
    return [row[0] for row in conn.execute(
        f"SELECT rows_snapshot FROM {TABLE_LOADS} WHERE org = ? AND table_name = ? AND outcome = ? "
        "AND rows_snapshot IS NOT NULL ORDER BY as_of DESC NULLS LAST LIMIT ?", [org, table, LANDED, loads]).fetchall()]


def fields_seen(conn: duckdb.DuckDBPyConnection, org: str, table: str) -> set[str]:
    """Every field outside the spec an earlier load of the organization's `table` recorded."""
    return {row[0] for row in conn.execute(
        f"SELECT DISTINCT unnest(map_keys(extra_fields)) FROM {TABLE_LOADS} WHERE org = ? AND table_name = ?",
        [org, table]).fetchall()}


def publish_health(warehouse: WarehouseResource, log: Any = None) -> bool:
    """analytics.duckdb as it was, with the warehouse's health rows it lacks appended (a failed run's, which
    publishes nothing else). False when nothing was ever published: the rows go out with the first publish."""
    def append_missing(conn: duckdb.DuckDBPyConnection) -> None:
        ensure_health_tables(conn)
        for table in (SYNC_RUNS, TABLE_LOADS):
            conn.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {WAREHOUSE_DATABASE}.{table} "
                         f"WHERE run_id NOT IN (SELECT run_id FROM {table})")

    return warehouse.amend_published(append_missing, log)
