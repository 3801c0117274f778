"""The analysts' copy: analytics.duckdb, published once per run after every warehouse write.

Downstream of every warehouse table, so lineage shows what analysts read and when it last
changed. A run whose warehouse steps failed publishes nothing: analysts keep the last
complete copy.
"""

from collections.abc import Sequence
from typing import Any

import dagster as dg
import duckdb

from resources.warehouse import WarehouseResource

ANALYTICS_KEY = dg.AssetKey(["analytics"])


def read_published(warehouse: WarehouseResource, table: str, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    """The rows of `sql` over the published analytics.duckdb, opened read-only: no writer lock, no wait
    for a sync; [] while nothing is published or `table` is not there yet. The copy may trail the
    warehouse by one unpublished write, never lead it."""
    if not warehouse.analytics_path.exists():
        return []
    conn = duckdb.connect(str(warehouse.analytics_path), read_only=True)
    try:
        if not conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchone()[0]:
            return []
        return conn.execute(sql, list(params)).fetchall()
    finally:
        conn.close()


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
