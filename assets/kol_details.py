"""KOL detail enrichment: GET /v1/kols/{id} for KOLs that are new or changed since last time.

The list shape lacks bio, notes, research interests, social, contact address and metrics;
`kol_details` holds them, one row per KOL, with the KOL's updated_at at fetch time. A KOL is
pending when it is active and has no detail row or its kols.updated_at is newer. Each run
fetches at most `limit` details (and never more than the run's remaining request budget),
oldest pending first, and reports how many remain; running out of budget never fails a run.
"""


import shutil
import time
from datetime import UTC, datetime

import dagster as dg
import pyarrow.parquet as pq

from assets.catalog import KOL_DETAIL_FIELDS_IN_KOLS, KOL_DETAILS, KOLS
from assets.metadata import markdown_preview, request_metadata
from assets.snapshot_date import snapshot_date
from assets.progress import ProgressReporter
from assets.records import RecordConverter
from assets.sql import read_parquet
from assets.warehouse import ensure_table, merge_rows
from resources import settings
from resources.api import CommopsApiResource
from resources.commops_api import AuthenticationError, RequestBudgetExceeded, ScopeError
from resources.warehouse import LakeResource, WarehouseResource

BATCH = 500


class KolDetailsConfig(dg.Config):
    limit: int = settings.enrich_details_limit()  # details fetched per run at most; 0 skips enrichment


PENDING_SQL = f"""
    SELECT k.id FROM {KOLS.table} k LEFT JOIN {KOL_DETAILS.table} d ON d.id = k.id
    WHERE NOT coalesce(k.is_archived, false) AND (d.id IS NULL OR k.updated_at > d.updated_at)
"""


def _pending(warehouse: WarehouseResource, context: dg.AssetExecutionContext, limit: int) -> tuple[list[str], int]:
    with warehouse.writer(context.log, publish=False) as conn:
        ensure_table(conn, KOL_DETAILS)
        total = conn.execute(f"SELECT count(*) FROM ({PENDING_SQL})").fetchone()[0]
        ids = [
            row[0]
            for row in conn.execute(
                f"{PENDING_SQL} ORDER BY k.updated_at, k.id LIMIT {int(limit)}"
            ).fetchall()
        ]
    return ids, int(total)


@dg.asset(
    key=["warehouse", "kol_details"],
    deps=[dg.AssetKey(["warehouse", "kols"])],
    group_name="warehouse",
    kinds={"duckdb"},
    pool="warehouse",
    description=f"DuckDB table kol_details: {KOL_DETAILS.description}",
    metadata={"table": KOL_DETAILS.table, "api_path": "/v1/kols/{id}"},
)
def kol_details(
    context: dg.AssetExecutionContext,
    config: KolDetailsConfig,
    api: CommopsApiResource,
    lake: LakeResource,
    warehouse: WarehouseResource,
    progress: dg.ResourceParam[ProgressReporter],
) -> dg.MaterializeResult:
    started = time.monotonic()
    client = api.client
    before = client.stats
    budget_left = max(0, api.max_requests_per_run - before.requests)
    ids, pending = _pending(warehouse, context, min(config.limit, budget_left))
    fetched, stopped_by = 0, None
    staging = lake.new_staging_dir(KOL_DETAILS.name, snapshot_date(context)) if ids else None
    try:
        if staging is not None:
            fetched, stopped_by = _fetch(context, client, ids, staging / "details.parquet", progress)
        with warehouse.writer(context.log) as conn:
            ensure_table(conn, KOL_DETAILS)
            if fetched:
                merge_rows(conn, KOL_DETAILS, read_parquet(staging / "details.parquet"))
            rows = conn.execute(f"SELECT count(*) FROM {KOL_DETAILS.table}").fetchone()[0]
            preview = markdown_preview(conn, KOL_DETAILS.table, ["id", "bio", "updated_at"])
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    remaining = pending - fetched
    if config.limit <= 0:
        context.log.info(f"KOL details: enrichment skipped (limit 0); {pending} pending")
    elif remaining:
        why = stopped_by or f"limit {config.limit} per run (COMMOPS_ENRICH_DETAILS_LIMIT), budget left {budget_left}"
        context.log.warning(f"KOL details: {fetched} fetched, {remaining} still pending ({why}); the next run continues")
    stats = client.stats - before
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": int(rows),
            "details_fetched": fetched,
            "pending_before": pending,
            "pending_remaining": remaining,
            **request_metadata(stats),
            "duration_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3)),
            "preview": dg.MetadataValue.md(preview),
        }
    )


def _fetch(context, client, ids: list[str], path, progress: ProgressReporter) -> tuple[int, str | None]:
    """Fetch details into a Parquet file, BATCH rows per row group. Returns (fetched, reason stopped early)."""
    enriched_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    converter = RecordConverter(KOL_DETAILS.schema, ignored=KOL_DETAIL_FIELDS_IN_KOLS, defaults={"enriched_at": enriched_at})
    fetched, stopped_by, batch = 0, None, []
    with pq.ParquetWriter(path, KOL_DETAILS.schema, compression="zstd") as writer:
        try:
            for _, data in client.get_many([f"/kols/{kol_id}" for kol_id in ids], skip_missing=True):
                batch.append(data)
                if len(batch) >= BATCH:
                    writer.write_batch(converter.to_batch(batch))
                    fetched += len(batch)
                    batch = []
                    progress.items("kol details", fetched, len(ids))
        except (AuthenticationError, ScopeError):
            raise
        except RequestBudgetExceeded as error:
            stopped_by = str(error)
        if batch:
            writer.write_batch(converter.to_batch(batch))
            fetched += len(batch)
    progress.items("kol details", fetched, len(ids))
    progress.finished("kol details")
    return fetched, stopped_by
