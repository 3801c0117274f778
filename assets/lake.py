"""Lake snapshot assets: each catalog resource paged from the API into one Parquet snapshot.

`lake/<resource>/snapshot_date=YYYY-MM-DD/data.parquet` is written page by page into a
private staging directory, de-duplicated (an id seen twice, e.g. a KOL archived between the
active and the archived walk, keeps the version received last), checked, and only then renamed
into place: a crashed run leaves no partial snapshot, a re-run of the day replaces it atomically.
Every row carries `_fetched_at`, the time its page arrived.
"""


import functools
import shutil
import time
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from assets import checks
from assets.catalog import CATALOG, ResourceSpec
from assets.metadata import markdown_preview, request_metadata
from assets.schemas import FETCHED_AT
from assets.snapshot_date import snapshot_date as run_snapshot_date
from assets.progress import ProgressReporter
from assets.records import RecordConverter
from assets.sql import read_parquet
from resources.api import CommopsApiResource
from resources.commops_api import Page
from resources.warehouse import LakeResource

SNAPSHOT_FILE = "data.parquet"
ROWS_PER_ROW_GROUP = 10_000


class SnapshotWriter:
    """Streams pages of one resource into a staged Parquet file with the resource's schema.

    A resource may be read in several walks (KOLs: active, then archived). The snapshot keeps
    the ids the API still counts at the end of each walk; an id in two walks (archived between
    them) keeps the version received last, an id the client saw vanish (and no other walk has)
    is dropped.
    """

    def __init__(self, staging: Path, spec: ResourceSpec):
        self.spec = spec
        self.staging = staging
        self.path = staging / SNAPSHOT_FILE
        self.rows_written = 0
        self.api_total = 0
        self.overlap = 0
        self._kept: set[str] = set()
        self._walk: set[str] = set()
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._writer = pq.ParquetWriter(self.path, spec.schema, compression="zstd")

    def write_page(self, page: Page, converter: RecordConverter) -> None:
        received = page.received_at.isoformat()
        for record in page.items:
            record[FETCHED_AT] = received
        self._walk.update(record.get(self.spec.key) for record in page.items)
        batch = converter.to_batch(page.items)
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        self.rows_written += batch.num_rows
        if self._buffered >= ROWS_PER_ROW_GROUP:
            self._flush()

    def end_walk(self, total: int, vanished: frozenset[str]) -> None:
        counted = self._walk - vanished
        self.overlap += len(counted & self._kept)
        self._kept |= counted
        self.api_total += total
        self._walk = set()

    @property
    def expected_rows(self) -> int:
        """The API's totals, an id counted by two walks counted once."""
        return self.api_total - self.overlap

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_batches(self._buffer, schema=self.spec.schema))
        self._buffer, self._buffered = [], 0

    def close(self, conn: duckdb.DuckDBPyConnection) -> int:
        """Finish the file, keeping one row (the newest) per counted id. Returns its rows."""
        self._flush()
        self._writer.close()
        if self.rows_written != len(self._kept):
            self._keep_newest(conn)
        return len(self._kept)

    def _keep_newest(self, conn: duckdb.DuckDBPyConnection) -> None:
        deduped = self.staging / f"deduped-{SNAPSHOT_FILE}"
        conn.execute("CREATE TEMP TABLE _kept_ids AS SELECT unnest(?::VARCHAR[]) AS id", [sorted(self._kept)])
        reader = conn.sql(
            f"SELECT * FROM {read_parquet(self.path)} WHERE {self.spec.key} IN (SELECT id FROM _kept_ids) "
            f"QUALIFY row_number() OVER (PARTITION BY {self.spec.key} "
            f"ORDER BY {FETCHED_AT} DESC) = 1"
        ).to_arrow_reader(ROWS_PER_ROW_GROUP)
        with pq.ParquetWriter(deduped, self.spec.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_table(pa.Table.from_batches([batch]).cast(self.spec.schema))
        conn.execute("DROP TABLE _kept_ids")
        deduped.replace(self.path)

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)


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
    staging = lake.new_staging_dir(spec.name, snapshot_date)
    writer = SnapshotWriter(staging, spec)
    try:
        for params, defaults in zip(spec.walks, spec.walk_defaults, strict=True):
            label = _walk_label(spec, params)
            converter = RecordConverter(spec.schema, defaults=defaults)
            walk = client.walk(spec.path, dict(params), sort=spec.sort, progress=functools.partial(progress.pages, label))
            for page in walk.pages():
                writer.write_page(page, converter)
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
    final = lake.publish(staging, spec.name, snapshot_date)
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
        metadata={"api_path": f"/v1{spec.path}", "id_prefix": spec.id_prefix},
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
