"""The analysts' copy: analytics.duckdb, published once per run after every warehouse write.

Downstream of every warehouse table, so lineage shows what analysts read and when it last
changed. A run whose warehouse steps failed publishes nothing: analysts keep the last
complete copy. A nightly run records its health rows (assets/sync_health.py) just before it
publishes. With the Iceberg settings, the same copy's current-state tables are then merged
into Iceberg tables on the object store for readers on other machines (resources/iceberg.py).
"""

import time

import dagster as dg

from assets.sync_health import NIGHTLY_SYNC, record_sync_health
from sync.catalog import ICEBERG_TABLES
from resources.iceberg import IcebergResource
from resources.warehouse import WarehouseResource

ANALYTICS_KEY = dg.AssetKey(["analytics"])


def build_analytics_asset(upstream: list[dg.AssetKey]) -> dg.AssetsDefinition:
    @dg.asset(
        key=ANALYTICS_KEY,
        deps=upstream,
        group_name="analytics",
        kinds={"duckdb"},
        pool="warehouse",
        description="analytics.duckdb: the warehouse as published for analysts (atomic copy; open it read-only); "
        "with COMMOPS_ICEBERG_* set, also its current-state tables as Iceberg tables.",
    )
    def analytics(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource, iceberg: IcebergResource
    ) -> dg.MaterializeResult:
        if context.job_name == NIGHTLY_SYNC:  # the run's health rows, in the copy about to be published
            try:
                record_sync_health(context.instance, context.run.run_id, warehouse, context.log, landed=True)
            except Exception as error:  # noqa: BLE001 (the night's data is published all the same)
                context.log.warning(f"sync health not recorded for this run: {str(error).splitlines()[0] if str(error) else error!r}")
        path = warehouse.publish_analytics(context.log)
        context.log.info(f"Published {path} for analysts ({warehouse.last_publish})")
        started = time.monotonic()
        published = iceberg.publish(path, ICEBERG_TABLES, context.log)
        iceberg_metadata = {
            f"iceberg_{what}_{p.table}": count for p in published
            for what, count in (("rows_written", p.rows_written), ("deletes_written", p.deletes_written))
        } | ({"iceberg_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3))} if published else {})
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(str(path)),
                "size_mb": dg.MetadataValue.float(round(path.stat().st_size / 1e6, 2)),
                "copied": warehouse.last_publish,
                **iceberg_metadata,
            }
        )

    return analytics
