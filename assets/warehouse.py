"""Warehouse assets: the run's lake snapshot merged into DuckDB current-state tables.

Per catalog resource: a table with one row per id (the newer version wins), its child tables
rebuilt for the ids the merge touched, a `<name>_history` view over every snapshot in the lake,
comments on every table and column. The writing itself is WarehouseResource's; publishing the
analysts' copy is the `analytics` asset's (assets/analytics.py), once per run.
"""

import time

import dagster as dg
import pyarrow.parquet as pq

from assets import checks
from assets.catalog import CATALOG, ResourceSpec
from assets.partitions import ORGS, partition_org
from assets.metadata import catalog_reference, column_schema, markdown_preview
from assets.snapshot_date import snapshot_date as run_snapshot_date
from resources.lake import LakeResource
from resources.orgs import DEFAULT_ORG
from resources.sql import read_parquet, sql_literal
from resources.warehouse import WarehouseResource


def load(
    context: dg.AssetExecutionContext, spec: ResourceSpec, lake: LakeResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    snapshot_date = run_snapshot_date(context)
    org = partition_org(context)
    lake.adopt_single_org_layout([spec.name], DEFAULT_ORG)  # a data directory from before organizations
    started = time.monotonic()
    # A lake on object storage: the committed file, downloaded for the block (docs/spec-decisions.md, #lake-on-s3).
    with lake.local_snapshot(org, spec.name, snapshot_date) as path, warehouse.writer(context.log) as session:
        snapshot = read_parquet(path)
        snapshot_rows = pq.ParquetFile(path).metadata.num_rows
        session.ensure_table(spec)
        written = session.merge(spec, snapshot, org=org, snapshot_date=snapshot_date)
        if lake.is_local:  # over object storage DuckDB 2.0 cannot glob: analysts read history as docs/analysts.md says
            session.ensure_history_view(spec, lake.relative_glob(spec.name))
        check_results = checks.run_warehouse_checks(session.conn, spec, snapshot, org)
        rows = session.count(spec.table, org)
        children = {f"rows_{child.name}": session.count(child.name, org) for child in spec.children}
        preview = markdown_preview(session.conn, f"(SELECT * FROM {spec.table} WHERE org = {sql_literal(org)})",
                                   [f.name for f in spec.schema][:4])
    context.log.info(f"warehouse {spec.table}: {written} rows of {org} written, {org} has {rows} rows")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "rows_written": written,
            "rows_kept_newer_in_table": snapshot_rows - written,
            **children,
            "duration_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3)),
            "table": spec.table,
            "warehouse": dg.MetadataValue.path(str(warehouse.path)),
            "preview": dg.MetadataValue.md(preview),
        },
        check_results=check_results,
    )


def build_table_asset(spec: ResourceSpec) -> dg.AssetsDefinition:
    key = dg.AssetKey(["warehouse", spec.name])
    deps = [dg.AssetKey(["lake", spec.name])]
    if spec.product_refs:
        deps.append(dg.AssetKey(["warehouse", "products"]))  # so the reference check sees today's products

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
    def _table(context: dg.AssetExecutionContext, lake: LakeResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
        return load(context, spec, lake, warehouse)

    return _table


TABLE_ASSETS = [build_table_asset(spec) for spec in CATALOG]
