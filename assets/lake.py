"""Lake snapshot assets: each catalog resource paged from the API into one Parquet snapshot.

Per catalog resource: every walk of the API list is converted page by page into Arrow (each row
stamped with `_fetched_at`, the time its page arrived) and streamed into a staged snapshot by
LakeResource, checked, and only then published to
`lake/<resource>/snapshot_date=YYYY-MM-DD/data.parquet`: a crashed run leaves no partial
snapshot, a re-run of the day replaces it atomically.
"""


import functools
import time
from typing import Any

import dagster as dg
import duckdb

from assets import checks
from assets.catalog import CATALOG, ResourceSpec
from assets.metadata import catalog_reference, column_schema, markdown_preview, request_metadata
from assets.progress import ProgressReporter
from assets.records import RecordConverter
from assets.schemas import FETCHED_AT
from assets.snapshot_date import snapshot_date as run_snapshot_date
from resources.api import CommopsApiResource
from resources.commops_api import Page
from resources.lake import LakeResource
from resources.sql import read_parquet


def _stamped(page: Page) -> list[dict[str, Any]]:
    """The page's records, each with the time its page was received (the row's _fetched_at)."""
    received = page.received_at.isoformat()
    for record in page.items:
        record[FETCHED_AT] = received
    return page.items


def _walk_label(spec: ResourceSpec, params: dict[str, str]) -> str:
    if len(spec.walks) == 1:
        return spec.name
    return f"{spec.name} " + " ".join(f"{k}={v}" for k, v in params.items())


def snapshot(
    context: dg.AssetExecutionContext,
    spec: ResourceSpec,
    api: CommopsApiResource,
    lake: LakeResource,
    progress: ProgressReporter,
) -> dg.MaterializeResult:
    """Page every walk of `spec` into a staged snapshot, check it, publish it."""
    snapshot_date = run_snapshot_date(context)
    client = api.client
    started, before = time.monotonic(), client.stats
    writer = lake.snapshot_writer(spec.name, snapshot_date, spec.schema, key=spec.key, newest_by=FETCHED_AT)
    try:
        for params, defaults in zip(spec.walks, spec.walk_defaults, strict=True):
            label = _walk_label(spec, params)
            converter = RecordConverter(spec.schema, defaults=defaults)
            walk = client.walk(spec.path, dict(params), sort=spec.sort, progress=functools.partial(progress.pages, label))
            for page in walk.pages():
                writer.write(converter.to_batch(_stamped(page)))
            writer.end_walk(walk.total or 0, walk.vanished_ids)
            progress.finished(label)
        conn = duckdb.connect(config={"memory_limit": "64MB", "threads": 2})
        try:
            rows = writer.close(conn)
            relation = read_parquet(writer.path)
            check_results = checks.run_snapshot_checks(conn, spec, relation, writer.expected_rows)
            preview = markdown_preview(conn, relation, [f.name for f in spec.schema][:4])
        finally:
            conn.close()
    except BaseException:
        writer.abort()
        raise
    final = lake.publish(writer.staging, spec.name, snapshot_date)
    stats = client.stats - before
    context.log.info(f"{spec.name}: {rows} rows -> {final} ({stats.requests} requests)")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "api_total": writer.expected_rows,
            "rows_fetched": writer.rows_written,
            **request_metadata(stats),
            "duration_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3)),
            "path": dg.MetadataValue.path(str(final)),
            "preview": dg.MetadataValue.md(preview),
        },
        check_results=check_results,
    )


def build_snapshot_asset(spec: ResourceSpec) -> dg.AssetsDefinition:
    key = dg.AssetKey(["lake", spec.name])

    @dg.asset(
        key=key,
        group_name="lake",
        kinds={"parquet"},
        check_specs=checks.snapshot_check_specs(spec, key),
        description=f"Parquet snapshot: {spec.description}",
        metadata={
            "api_path": f"/v1{spec.path}",
            "id_prefix": spec.id_prefix,
            **column_schema(spec.schema),
            **catalog_reference(spec),
        },
    )
    def _snapshot(
        context: dg.AssetExecutionContext,
        api: CommopsApiResource,
        lake: LakeResource,
        progress: dg.ResourceParam[ProgressReporter],
    ) -> dg.MaterializeResult:
        return snapshot(context, spec, api, lake, progress)

    return _snapshot


SNAPSHOT_ASSETS = [build_snapshot_asset(spec) for spec in CATALOG]
