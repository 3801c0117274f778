"""The analysts' copy: analytics.duckdb, published once per run after every warehouse write.

Downstream of every warehouse table, so lineage shows what analysts read and when it last
changed. A run whose warehouse steps failed publishes nothing: analysts keep the last
complete copy.
"""

import dagster as dg

from resources.warehouse import WarehouseResource

ANALYTICS_KEY = dg.AssetKey(["analytics"])


def build_analytics_asset(upstream: list[dg.AssetKey]) -> dg.AssetsDefinition:
    @dg.asset(
        key=ANALYTICS_KEY,
        deps=upstream,
        group_name="analytics",
        kinds={"duckdb"},
        pool="warehouse",
        description="analytics.duckdb: the warehouse as published for analysts (atomic copy; open it read-only).",
    )
    def analytics(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
        path = warehouse.publish_analytics(context.log)
        context.log.info(f"Published {path} for analysts")
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(str(path)),
                "size_mb": dg.MetadataValue.float(round(path.stat().st_size / 1e6, 2)),
            }
        )

    return analytics
