"""The Parquet lake: snapshots under <data_dir>/lake/<resource>/snapshot_date=YYYY-MM-DD/.

Snapshots are written into a private staging directory on the lake's filesystem and renamed
into place, so readers never see a partial snapshot; staging left by a process that died is
deleted at the start of the next run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from resources.files import fsync_dir, pid_alive
from resources.sql import read_parquet

LAKE_DIR = "lake"
STAGING_DIR = ".staging"
SNAPSHOT_FILE = "data.parquet"
ROWS_PER_ROW_GROUP = 10_000


class SnapshotWriter:
    """Streams record batches of one resource into a staged Parquet file of a fixed schema.

    A resource may be read in several walks (KOLs: active, then archived). The snapshot keeps
    the ids the API still counts at the end of each walk; an id in two walks (archived between
    them) keeps the version received last (the greatest `newest_by`), an id the client saw
    vanish (and no other walk has) is dropped.
    """

    def __init__(self, staging: Path, schema: pa.Schema, *, key: str, newest_by: str):
        self.staging = staging
        self.schema = schema
        self.key = key
        self.newest_by = newest_by
        self.path = staging / SNAPSHOT_FILE
        self.rows_written = 0
        self.api_total = 0
        self.overlap = 0
        self._kept: set[str] = set()
        self._walk: set[str] = set()
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._writer = pq.ParquetWriter(self.path, schema, compression="zstd")

    def write(self, batch: pa.RecordBatch) -> None:
        self._walk.update(batch.column(self.key).to_pylist())
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

    def close(self, conn: duckdb.DuckDBPyConnection) -> int:
        """Finish the file, keeping one row (the one received last) per counted id. Returns its rows."""
        self._flush()
        self._writer.close()
        if self.rows_written != len(self._kept):
            self._keep_newest(conn)
        return len(self._kept)

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_batches(self._buffer, schema=self.schema))
        self._buffer, self._buffered = [], 0

    def _keep_newest(self, conn: duckdb.DuckDBPyConnection) -> None:
        deduped = self.staging / f"deduped-{SNAPSHOT_FILE}"
        conn.execute("CREATE TEMP TABLE _kept_ids AS SELECT unnest(?::VARCHAR[]) AS id", [sorted(self._kept)])
        reader = conn.sql(
            f"SELECT * FROM {read_parquet(self.path)} WHERE {self.key} IN (SELECT id FROM _kept_ids) "
            f"QUALIFY row_number() OVER (PARTITION BY {self.key} ORDER BY {self.newest_by} DESC) = 1"
        ).to_arrow_reader(ROWS_PER_ROW_GROUP)
        with pq.ParquetWriter(deduped, self.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_table(pa.Table.from_batches([batch]).cast(self.schema))
        conn.execute("DROP TABLE _kept_ids")
        deduped.replace(self.path)


class LakeResource(dg.ConfigurableResource):
    """Parquet snapshots under <data_dir>/lake/<resource>/snapshot_date=YYYY-MM-DD/."""

    data_dir: str

    @property
    def root(self) -> Path:
        return Path(self.data_dir) / LAKE_DIR

    def snapshot_dir(self, resource: str, snapshot_date: str) -> Path:
        return self.root / resource / f"snapshot_date={snapshot_date}"

    @staticmethod
    def relative_glob(resource: str) -> str:
        """Every snapshot file of a resource, relative to the data directory (what the history views read)."""
        return f"{LAKE_DIR}/{resource}/snapshot_date=*/*.parquet"

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.remove_abandoned_staging()

    def snapshot_writer(
        self, resource: str, snapshot_date: str, schema: pa.Schema, *, key: str, newest_by: str
    ) -> SnapshotWriter:
        """A writer into a new private staging directory; `publish(writer.staging, ...)` puts it in place."""
        return SnapshotWriter(self.new_staging_dir(resource, snapshot_date), schema, key=key, newest_by=newest_by)

    def snapshot_file(self, resource: str, snapshot_date: str) -> Path:
        return self.snapshot_dir(resource, snapshot_date) / SNAPSHOT_FILE

    def new_staging_dir(self, resource: str, snapshot_date: str) -> Path:
        """A private directory on the lake's filesystem (so publishing is a rename)."""
        path = self.root / STAGING_DIR / f"{resource}-{snapshot_date}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    @staticmethod
    def discard(staging: Path) -> None:
        """Drop a staged snapshot that will not be published (its run failed)."""
        shutil.rmtree(staging, ignore_errors=True)

    def remove_abandoned_staging(self) -> None:
        """Staging directories of processes that died (a killed sync) are deleted."""
        staging = self.root / STAGING_DIR
        if not staging.is_dir():
            return
        for entry in staging.iterdir():
            parts = entry.name.rsplit("-", 2)
            if len(parts) == 3 and parts[1].isdigit() and not pid_alive(int(parts[1])):
                shutil.rmtree(entry, ignore_errors=True)

    def publish(self, staging: Path, resource: str, snapshot_date: str) -> Path:
        """Move a complete staged snapshot into place; an existing snapshot of the date is replaced.

        Readers never see a partial snapshot: the old one is renamed aside, the new one renamed
        in, the old one deleted (between the two renames the date is briefly absent).
        """
        final = self.snapshot_dir(resource, snapshot_date)
        final.parent.mkdir(parents=True, exist_ok=True)
        # Two runs of the same date may finish together: their renames must not interleave.
        with open(self.root / ".publish.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            retired = None
            if final.exists():
                retired = staging.parent / f"retired-{resource}-{snapshot_date}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                os.rename(final, retired)
            os.rename(staging, final)
            fsync_dir(final.parent)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
        return final
