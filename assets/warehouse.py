"""Warehouse assets: the run's lake snapshot merged into DuckDB current-state tables.

Per catalog resource: a table with one row per id (the newer version wins), its child tables
rebuilt for the ids the merge touched, a `<name>_history` view over every snapshot in the lake,
comments on every table and column. The writing itself is WarehouseResource's; publishing the
analysts' copy is the `analytics` asset's (assets/analytics.py), once per run.
"""

import functools
import time
from dataclasses import dataclass, field, replace
from typing import Any

import dagster as dg
import duckdb
import pyarrow.parquet as pq

from assets import checks
from sync.catalog import CATALOG, ResourceSpec, fetched_after
from assets.partitions import ORGS, partition_org
from assets.metadata import SyncStats, catalog_reference, column_schema, markdown_profile
from assets.snapshot_date import snapshot_date as run_snapshot_date
from resources.changed_rows import changes_of
from resources import sync_health
from resources.lake import LakeResource
from resources.settings import load_settings
from resources.sql import read_parquet, sql_literal
from resources.warehouse import MergeCounts, WarehouseResource


@dataclass(frozen=True)
class Merged:
    """What one merge of a snapshot into its table did, for the table's materialization."""

    snapshot_rows: int
    written: int
    rows: int
    children: dict[str, int]
    profile: str
    check_results: list[dg.AssetCheckResult]
    seconds: float
    threads: int  # DuckDB's, in the session that merged
    read_from_changes: int | None = None  # rows written read from the snapshot's side file (None: none was read)
    health: dict[str, Any] = field(default_factory=dict)  # the load's counts for table_loads (assets/sync_health.py)
    note: str = ""  # what the merge had to do differently (a warning in the table's step)


def merge_snapshot(
    spec: ResourceSpec, org: str, snapshot_date: str, lake: LakeResource, warehouse: WarehouseResource, log: Any = None,
    *, alone: bool = False,
) -> Merged:
    """Merge the published snapshot of `spec` for `org` and `snapshot_date` into its table, then check the table.
    `alone` (no fetch runs beside it): on the warehouse's `merge_alone_threads`, and should DuckDB run out of
    memory there (wide rows hold a row group per thread), again on `threads`: the merge commits whole or not at all."""
    started, note = time.monotonic(), ""
    if alone and warehouse.merge_alone_threads > warehouse.threads:
        try:
            return _merge_and_check(spec, org, snapshot_date, lake, warehouse, log,
                                    warehouse.merge_alone_threads, warehouse.merge_alone_memory_limit)
        except duckdb.Error as error:
            if not _out_of_memory(error):
                raise
            note = (f"warehouse {spec.table}: out of memory on {warehouse.merge_alone_threads} threads "
                    f"({warehouse.merge_alone_memory_limit}), merged again on {warehouse.threads}: "
                    + str(error).splitlines()[0])
    merged = _merge_and_check(spec, org, snapshot_date, lake, warehouse, log, warehouse.threads, warehouse.memory_limit)
    return replace(merged, seconds=time.monotonic() - started, note=note)


def _out_of_memory(error: duckdb.Error) -> bool:
    """DuckDB out of memory: raised as such, or as a TransactionException when a commit cannot allocate."""
    return isinstance(error, duckdb.OutOfMemoryException) or "could not allocate" in str(error)


def _merge_and_check(spec: ResourceSpec, org: str, snapshot_date: str, lake: LakeResource, warehouse: WarehouseResource,
                     log: Any, threads: int, memory_limit: str) -> Merged:
    started = time.monotonic()
    # A lake on object storage: the committed file, downloaded for the block (docs/spec-decisions.md#lake-on-s3).
    with (lake.local_snapshot(org, spec.name, snapshot_date) as path,
          warehouse.writer(log, threads=threads, memory_limit=memory_limit) as session):
        snapshot = read_parquet(path)
        snapshot_rows = pq.ParquetFile(path).metadata.num_rows
        session.ensure_table(spec)
        changes = changes_of(path)  # the rows that differ from the snapshot before, when written beside it
        written = session.merge(spec, snapshot, org=org, snapshot_date=snapshot_date,
                                changed_relation=None if changes is None else read_parquet(changes))
        if lake.is_local:  # over object storage DuckDB 2.0 cannot glob: analysts read history as docs/analysts.md says
            session.ensure_history_view(spec, lake.relative_glob(spec.name))
        check_results = checks.run_warehouse_checks(session.conn, spec, snapshot, org)
        health, health_results = _health(session.conn, spec, snapshot, snapshot_rows, org, session.merge_counts)
        check_results += health_results
        rows = session.count(spec.table, org)
        children = {f"rows_{child.name}": session.count(child.name, org) for child in spec.children}
        profile = markdown_profile(session.conn, f"(SELECT * FROM {spec.table} WHERE org = {sql_literal(org)})",
                                   [f.name for f in spec.schema][:4])
    return Merged(snapshot_rows, written, rows, children, profile, check_results, time.monotonic() - started, threads,
                  session.read_from_changes, health=health)


def _health(conn: duckdb.DuckDBPyConnection, spec: ResourceSpec, snapshot: str, snapshot_rows: int, org: str,
            counts: MergeCounts | None) -> tuple[dict[str, Any], list[dg.AssetCheckResult]]:
    """The load's counts for `table_loads` and the two checks reading its history (volume, schema drift)."""
    settings = load_settings()
    sync_health.ensure_health_tables(conn)
    recent = sync_health.recent_snapshot_rows(conn, org, spec.table, settings.volume_nights)
    volume = checks.volume_check(snapshot_rows, recent, max_drop=settings.volume_max_drop,
                                 max_rise=settings.volume_max_rise)
    extra = checks.extra_fields(conn, spec, snapshot)
    drift, new = checks.schema_drift_check(extra, sync_health.fields_seen(conn, org, spec.table))
    health: dict[str, Any] = {"rows_snapshot": snapshot_rows, "extra_fields": dg.MetadataValue.json(extra),
                              "new_fields": dg.MetadataValue.json(new)}
    if counts is not None:
        health |= {"rows_inserted": counts.inserted, "rows_updated": counts.updated,
                   "rows_unchanged": snapshot_rows - counts.inserted - counts.updated}
        if counts.archived is not None:
            health["rows_archived"] = counts.archived
    return health, [volume, drift]


def hand_merge_to_background(
    context: dg.AssetExecutionContext, spec: ResourceSpec, lake: LakeResource, warehouse: WarehouseResource
) -> bool:
    """Called by the snapshot asset once its snapshot is published and its blocking checks passed: hand the
    table's merge to the run's background writer, so it runs while the next list is fetched. Only when the
    table's step runs later in this run (it takes the result), and after the merges of the tables it reads
    (the writer keeps the order merges are handed in); otherwise the table's step merges, as Dagster orders it.
    A merge no fetch of this run will run beside (the last list's: the run waits for it) takes both cores."""
    background = warehouse.background
    if background is None or not _steps_share_this_process(context):
        return False
    if not _step_follows_in_run(context, table_key(spec.name)):
        return False
    org, snapshot_date = partition_org(context), run_snapshot_date(context)
    for read in _tables_read(spec):
        if _step_follows_in_run(context, read) and not background.handed((read.path[-1], org, snapshot_date)):
            return False
    alone = next_fetch_in_run(context, spec.name) is None
    background.hand((spec.name, org, snapshot_date),
                    functools.partial(merge_snapshot, spec, org, snapshot_date, lake, warehouse, alone=alone))
    return True


def load(
    context: dg.AssetExecutionContext, spec: ResourceSpec, lake: LakeResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    snapshot_date = run_snapshot_date(context)
    org = partition_org(context)
    handed = warehouse.background.take((spec.name, org, snapshot_date)) if warehouse.background else None
    if handed is not None:
        merged = handed.result()  # the merge's error, raised again here, fails this step
    else:
        merged = merge_snapshot(spec, org, snapshot_date, lake, warehouse, context.log)
    if merged.note:
        context.log.warning(merged.note)
    context.log.info(f"warehouse {spec.table}: {merged.written} rows of {org} written, {org} has {merged.rows} rows")
    return dg.MaterializeResult(
        metadata={
            **SyncStats(rows=merged.rows, duration_seconds=merged.seconds).as_metadata(),
            "rows_written": merged.written,
            "rows_kept_newer_in_table": merged.snapshot_rows - merged.written,
            **merged.health,
            **({} if merged.read_from_changes is None else {"rows_read_from_changed_file": merged.read_from_changes}),
            **merged.children,
            "merged_beside_fetch": handed is not None,
            "merge_threads": merged.threads,
            "table": spec.table,
            "warehouse": dg.MetadataValue.path(str(warehouse.path)),
            "profile": dg.MetadataValue.md(merged.profile),
        },
        check_results=merged.check_results,
    )


def table_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["warehouse", name])


def snapshot_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["lake", name])


def _tables_read(spec: ResourceSpec) -> list[dg.AssetKey]:
    """The tables whose merge must come first (the reference check reads today's products)."""
    return [table_key("products")] if spec.product_refs else []


def next_fetch_in_run(context: dg.AssetExecutionContext, name: str) -> str | None:
    """The list this run fetches after `name`'s, when its step runs in this process too (by FETCH_ORDER)."""
    if not _steps_share_this_process(context):
        return None
    return next((later for later in fetched_after(name) if _step_follows_in_run(context, snapshot_key(later))), None)


def _steps_share_this_process(context: dg.AssetExecutionContext) -> bool:
    """Whether the run's steps run in this process, one after the other (the nightly job's executor, and
    `execute_in_process`/`materialize`'s): with a process per step, the table step would never see the merge."""
    return context.job_def.executor_def.name in ("in_process", "execute_in_process_executor")


def _step_follows_in_run(context: dg.AssetExecutionContext, key: dg.AssetKey) -> bool:
    """Whether the step materializing `key` is one this run executes (a subset or a re-execution may leave it out)."""
    layer = context.job_def.asset_layer
    if key not in layer.selected_asset_keys:
        return False
    if context.run.asset_selection and key not in context.run.asset_selection:  # empty: the whole job
        return False
    step_keys = context.run.step_keys_to_execute
    return step_keys is None or str(layer.get_op_output_handle(key).node_handle) in step_keys


def build_table_asset(spec: ResourceSpec) -> dg.AssetsDefinition:
    key = table_key(spec.name)
    deps = [snapshot_key(spec.name), *_tables_read(spec)]  # so the reference check sees today's products

    @dg.asset(
        key=key,
        deps=deps,
        partitions_def=ORGS,
        group_name="warehouse",
        kinds={"duckdb"},
        pool="warehouse",
        check_specs=checks.warehouse_check_specs(spec, key),
        description=f"DuckDB table {spec.table}: {spec.description}",
        metadata={
            "table": spec.table,
            "children": ", ".join(c.name for c in spec.children) or "none",
            **column_schema(spec.schema, warehouse=True),
            **catalog_reference(spec),
        },
    )
    def _table(context: dg.AssetExecutionContext, lake: LakeResource, warehouse: WarehouseResource):
        yield from checks.apart(key, load(context, spec, lake, warehouse))

    return _table


TABLE_ASSETS = [build_table_asset(spec) for spec in CATALOG]
