"""The Parquet lake: snapshots under <lake>/org=<organization>/<resource>/snapshot_date=YYYY-MM-DD/, where
<lake> is <data_dir>/lake, or an s3:// location (COMMOPS_LAKE_URL; resources/lake_s3.py).

Snapshots are written into a private staging directory on local disk (finished and checked there),
then published: on a local lake renamed into place, on object storage uploaded under a run folder
and committed by a manifest. Either way readers never see a partial snapshot; what a process that
died left behind is deleted at the start of a later run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from resources.changed_rows import (CHANGES_DIR, ChangedRows, changes_path, new_snapshot_id, snapshot_id_of,
                                    with_snapshot_id)
from resources.digest import DIGEST_COLUMN, DIGEST_FIELD, digest_sql
from resources.files import fsync_dir, pid_alive
from resources.lake_s3 import S3Lake
from resources.object_store import endpoint_url, region
from resources.process_databases import process_database
from resources.sql import read_parquet

LAKE_DIR = "lake"
LAKE_URL_ENV = "COMMOPS_LAKE_URL"  # s3://bucket/prefix: the lake on object storage; unset: <data_dir>/lake
ORG_PARTITION = "org"  # the lake's first hive level: lake/org=<organization>/...
STAGING_DIR = ".staging"
SNAPSHOT_FILE = "data.parquet"
ROWS_PER_ROW_GROUP = 10_000


class StagedSnapshot:
    """A snapshot being written: record batches of a fixed schema streamed into a staged Parquet file,
    then finished (one row per id, the one received last by `newest_by`; rows gone from the API left
    out). Given `digest` fields, each row also carries its digest (resources/digest.py), hashed as it is
    written, and given a `previous` snapshot file too, the rows that differ from it go to a side file as
    well (`changes`; resources/changed_rows.py), compared within ranges of the list's `sort` key. It owns
    a small DuckDB connection (`conn`: a cursor of a database the process keeps, resources/process_databases.py)
    for hashing, finishing and the checks that read it. The fields named `unique` (a value per row: ids, emails)
    are written without a dictionary, which would only cost: a quarter of the writing time of the CRM's contacts."""

    def __init__(self, staging: Path, schema: pa.Schema, *, key: str, newest_by: str, digest: tuple[str, ...] = (),
                 previous: Path | None = None, sort: str | None = None, replaces: str | None = None,
                 unique: tuple[str, ...] = ()):
        self.staging = staging
        self.digest = digest
        self.rows_schema = schema  # the batches'
        self.snapshot_id = new_snapshot_id()
        # the file's; `replaces`: the id of the same date's snapshot this one replaces (a re-run of the day)
        self.schema = with_snapshot_id(schema.append(DIGEST_FIELD) if digest else schema, self.snapshot_id, replaces)
        self.key = key
        self.newest_by = newest_by
        self.path = staging / SNAPSHOT_FILE
        self.rows_written = 0
        self.published: Path | str | None = None  # where it went, once published: a folder, or an s3:// URL
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._options = {"compression": "zstd",
                         "use_dictionary": [name for name in self.schema.names if name not in unique] if unique else True}
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(self.path, self.schema, **self._options)
        self._conn: duckdb.DuckDBPyConnection | None = None
        self.changes: ChangedRows | None = None  # compared by digest: none without them
        if digest and previous is not None:
            self.changes = ChangedRows.against(previous, changes_path(staging, SNAPSHOT_FILE), self.schema, sort=sort)

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        if self._conn is None:
            self._conn = process_database("64MB", 2).cursor()
        return self._conn

    @property
    def relation(self) -> str:
        """The staged file as a DuckDB table expression."""
        return read_parquet(self.path)

    def write(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        self.rows_written += batch.num_rows
        if self._buffered >= ROWS_PER_ROW_GROUP:
            self._flush()

    def finish(self, *, drop: frozenset[str] = frozenset(), repeated_ids: bool = False) -> int:
        """Close the file: when an id may have been written twice (it moved between lists) keep the
        version received last; leave out the ids in `drop`. Returns its rows."""
        self._flush()
        assert self._writer is not None
        self._writer.close()
        self._writer = None
        if self.changes is not None:
            self.changes.finish()
        if not drop and not repeated_ids:
            return self.rows_written
        rows = self._rewrite(drop)
        if self.changes is not None and not self.changes.abandoned:
            self._keep_changes_of_finished()
        return rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.changes is not None:
            self.changes.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _flush(self) -> None:
        if self._buffer:
            assert self._writer is not None
            rows = self._with_digest(pa.Table.from_batches(self._buffer, schema=self.rows_schema))
            self._writer.write_table(rows)
            if self.changes is not None:
                self.changes.write(rows)
        self._buffer, self._buffered = [], 0

    def _with_digest(self, rows: pa.Table) -> pa.Table:
        if not self.digest:
            return rows
        self.conn.register("_rows", rows)
        try:
            digests = self.conn.sql(f"SELECT {digest_sql(self.digest)} FROM _rows").to_arrow_table().column(0)
        finally:
            self.conn.unregister("_rows")
        return rows.append_column(DIGEST_FIELD, digests)

    def _rewrite(self, drop: frozenset[str]) -> int:
        finished = self.staging / f"finished-{SNAPSHOT_FILE}"
        self.conn.execute("CREATE OR REPLACE TEMP TABLE _dropped AS SELECT unnest(?::VARCHAR[]) AS id", [sorted(drop)])
        reader = self.conn.sql(
            f"SELECT * FROM {self.relation} WHERE {self.key} NOT IN (SELECT id FROM _dropped) "
            f"QUALIFY row_number() OVER (PARTITION BY {self.key} ORDER BY {self.newest_by} DESC) = 1"
        ).to_arrow_reader(ROWS_PER_ROW_GROUP)
        rows = 0
        with pq.ParquetWriter(finished, self.schema, **self._options) as writer:
            for batch in reader:
                writer.write_table(pa.Table.from_batches([batch]).cast(self.schema))
                rows += batch.num_rows
        self.conn.execute("DROP TABLE _dropped")
        finished.replace(self.path)
        return rows

    def _keep_changes_of_finished(self) -> None:
        """The side file cut to the rows the finished snapshot kept (not dropped; of an id written twice, the
        version kept), so that it stays a subset of the snapshot's rows."""
        changes = self.changes.path
        kept = changes.with_name(f"finished-{changes.name}")
        key, newest = self.key, self.newest_by
        reader = self.conn.sql(
            f"SELECT c.* FROM {read_parquet(changes)} c SEMI JOIN {self.relation} f ON c.{key} = f.{key} "
            f"AND c.{newest} IS NOT DISTINCT FROM f.{newest} AND c.{DIGEST_COLUMN} = f.{DIGEST_COLUMN} "
            f"QUALIFY row_number() OVER (PARTITION BY c.{key}) = 1"
        ).to_arrow_reader(ROWS_PER_ROW_GROUP)
        with pq.ParquetWriter(kept, self.changes.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_table(pa.Table.from_batches([batch]).cast(self.changes.schema))
        kept.replace(changes)


class LakeResource(dg.ConfigurableResource):
    """Parquet snapshots: an organization's under <lake>/org=<org>/<resource>/snapshot_date=YYYY-MM-DD/,
    the deployment's own (CRM contacts, org None) under <lake>/<resource>/snapshot_date=YYYY-MM-DD/.
    <lake> is <data_dir>/lake, or `url` (s3://bucket/prefix) when given; staging is on local disk."""

    data_dir: str
    url: str | None = None  # COMMOPS_LAKE_URL

    @property
    def root(self) -> Path:
        """The local lake, or the local staging area of a lake on object storage."""
        return Path(self.data_dir) / LAKE_DIR

    @property
    def is_local(self) -> bool:
        return not self.url

    @property
    def location(self) -> str:
        """Where the snapshots are: a local directory or an s3:// URL."""
        return self.url.rstrip("/") if self.url else str(self.root)

    def snapshot_dir(self, org: str | None, resource: str, snapshot_date: str) -> Path:
        return self.root / snapshot_folder(org, resource, snapshot_date)

    @staticmethod
    def relative_glob(resource: str) -> str:
        """Every organization's snapshot files of a resource, relative to the data directory (what the
        history views read, with `org` and `snapshot_date` from the folder names)."""
        return f"{LAKE_DIR}/{ORG_PARTITION}=*/{resource}/snapshot_date=*/*.parquet"

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        removed = self.remove_abandoned_staging()
        if removed and context.log is not None:
            context.log.info(f"lake: removed {len(removed)} run folder(s) left by killed runs: {', '.join(removed)}")

    @contextmanager
    def snapshot(
        self, org: str | None, resource: str, snapshot_date: str, schema: pa.Schema, *, key: str,
        newest_by: str | None = None, publish: bool = True, digest: tuple[str, ...] = (), sorted_by: str | None = None,
        unique: tuple[str, ...] = (),
    ) -> Iterator[StagedSnapshot]:
        """Stage a snapshot in a private directory; when the block ends without an error it is published
        (`snapshot.published` says where), or discarded with `publish=False` (a scratch file). An error
        discards it: readers never see a partial snapshot. Given `digest` fields, the file also holds each
        row's digest of them (`_digest`); given as well the field the rows come `sorted_by` (a list's sort
        key), a local lake's snapshot gets the side file of the rows that differ from the latest snapshot
        before it (resources/changed_rows.py). `unique`: fields with a value per row, written without a dictionary."""
        staging = self.new_staging_dir(org, resource, snapshot_date)
        previous = self.latest_snapshot_file(org, resource, snapshot_date) if sorted_by and publish else None
        staged = StagedSnapshot(staging, schema, key=key, newest_by=newest_by or key, digest=digest,
                                previous=previous, sort=sorted_by, replaces=_replaced_id(previous, snapshot_date),
                                unique=unique)
        try:
            yield staged
        except BaseException:
            staged.close()
            self.discard(staged.staging)
            raise
        staged.close()
        if not publish:
            self.discard(staged.staging)
        elif self.is_local:
            staged.published = self.publish(staged.staging, org, resource, snapshot_date)
        else:
            try:
                rows = pq.ParquetFile(staged.path).metadata.num_rows
                staged.published = _s3_lake(self.url).publish(staged.path, snapshot_folder(org, resource, snapshot_date), rows)
            finally:
                self.discard(staged.staging)

    def snapshot_file(self, org: str | None, resource: str, snapshot_date: str) -> Path:
        """The published file of a local lake (`local_snapshot` reads either kind)."""
        return self.snapshot_dir(org, resource, snapshot_date) / SNAPSHOT_FILE

    def latest_snapshot_file(self, org: str | None, resource: str, snapshot_date: str) -> Path | None:
        """A local lake's published file of the latest date up to `snapshot_date` (a re-run's own date
        included); None on object storage (its side files are not published: nothing to compare for)."""
        if not self.is_local:
            return None
        folder = self.snapshot_dir(org, resource, snapshot_date).parent
        dates = sorted((p.parent.name for p in folder.glob(f"snapshot_date=*/{SNAPSHOT_FILE}")), reverse=True)
        latest = next((name for name in dates if name.split("=", 1)[1] <= snapshot_date), None)
        return None if latest is None else folder / latest / SNAPSHOT_FILE

    @contextmanager
    def local_snapshot(self, org: str | None, resource: str, snapshot_date: str) -> Iterator[Path]:
        """The published snapshot as a local Parquet file, for DuckDB to read: a local lake's own file, or
        the committed file of a lake on object storage downloaded (streamed) into the staging area and
        deleted when the block ends. FileNotFoundError with a one-line message when there is none."""
        missing = f"No {resource} snapshot{'' if org is None else f' of {org}'} for {snapshot_date}"
        if self.is_local:
            path = self.snapshot_file(org, resource, snapshot_date)
            if not path.exists():
                raise FileNotFoundError(f"{missing} at {path}: materialize lake/{resource} first")
            yield path
            return
        folder = snapshot_folder(org, resource, snapshot_date)
        staging = self.new_staging_dir(org, f"read-{resource}", snapshot_date)
        try:
            try:
                _s3_lake(self.url).download(folder, staging / SNAPSHOT_FILE)
            except FileNotFoundError:
                raise FileNotFoundError(f"{missing} at {self.location}/{folder}: materialize lake/{resource} first") from None
            yield staging / SNAPSHOT_FILE
        finally:
            self.discard(staging)

    def new_staging_dir(self, org: str | None, resource: str, snapshot_date: str) -> Path:
        """A private directory on the lake's filesystem (so publishing is a rename)."""
        name = f"{org or '_'}.{resource}-{snapshot_date}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        path = self.root / STAGING_DIR / name
        path.mkdir(parents=True)
        return path

    @staticmethod
    def discard(staging: Path) -> None:
        """Drop a staged snapshot that will not be published (its run failed)."""
        shutil.rmtree(staging, ignore_errors=True)

    def remove_abandoned_staging(self) -> list[str]:
        """Staging directories of processes that died (a killed sync) are deleted; on object storage, also
        the run folders killed runs left (resources/lake_s3.py), which are returned."""
        staging = self.root / STAGING_DIR
        if staging.is_dir():
            for entry in staging.iterdir():
                parts = entry.name.rsplit("-", 2)
                if len(parts) == 3 and parts[1].isdigit() and not pid_alive(int(parts[1])):
                    shutil.rmtree(entry, ignore_errors=True)
        return [] if self.is_local else _s3_lake(self.url).remove_abandoned()

    def publish(self, staging: Path, org: str | None, resource: str, snapshot_date: str) -> Path:
        """Move a complete staged snapshot into place; an existing snapshot of the date is replaced.

        Readers never see a partial snapshot, nor a date without one: a new date's folder is renamed in
        whole; an existing date's one file is renamed over (a reader that opened the old file reads it to
        the end; one that opens the path afterwards reads the new one).
        """
        final = self.snapshot_dir(org, resource, snapshot_date)
        final.parent.mkdir(parents=True, exist_ok=True)
        # Two runs of the same date may finish together: their renames must not interleave.
        with open(self.root / ".publish.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if final.exists():
                shutil.rmtree(final / CHANGES_DIR, ignore_errors=True)  # the old snapshot's: read with it only
                os.replace(staging / SNAPSHOT_FILE, final / SNAPSHOT_FILE)
                if (staging / CHANGES_DIR).exists():
                    os.rename(staging / CHANGES_DIR, final / CHANGES_DIR)
                fsync_dir(final)
            else:
                os.rename(staging, final)
                fsync_dir(final.parent)
        self.discard(staging)  # emptied, or gone
        return final

    def adopt_single_org_layout(self, resources: Iterable[str], org: str) -> list[str]:
        """A data directory from before organizations: its `lake/<resource>/` folders become
        `lake/org=<org>/<resource>/` (renames on one filesystem: nothing is copied or lost). Returns
        the resources moved. A lake on object storage is new: nothing to adopt. Idempotent; where there
        is nothing to adopt, a look at each folder and nothing written."""
        if not self.is_local:
            return []
        before = [resource for resource in resources if any((self.root / resource).glob("snapshot_date=*"))]
        if not before:
            return []
        moved = []
        with open(self._lock_file(), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for resource in before:
                old = self.root / resource
                if not old.is_dir() or not any(old.glob("snapshot_date=*")):
                    continue  # adopted by another process meanwhile
                new = self.root / f"{ORG_PARTITION}={org}" / resource
                if new.exists():
                    for folder in old.glob("snapshot_date=*"):
                        target = new / folder.name
                        if not target.exists():
                            os.rename(folder, target)
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    new.parent.mkdir(parents=True, exist_ok=True)
                    os.rename(old, new)
                moved.append(resource)
            if moved:
                fsync_dir(self.root)
        return moved

    def _lock_file(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root / ".publish.lock"


def _replaced_id(previous: Path | None, snapshot_date: str) -> str | None:
    """The id of the snapshot a re-run of `snapshot_date` replaces (`unknown` for a file without one or unreadable);
    None when `previous` is an earlier date's."""
    if previous is None or previous.parent.name != f"snapshot_date={snapshot_date}":
        return None
    try:
        return snapshot_id_of(previous) or "unknown"
    except (OSError, pa.ArrowInvalid):
        return "unknown"


def snapshot_folder(org: str | None, resource: str, snapshot_date: str) -> str:
    """A snapshot's folder relative to the lake (hive layout)."""
    base = f"{resource}/snapshot_date={snapshot_date}"
    return base if org is None else f"{ORG_PARTITION}={org}/{base}"


def _s3_lake(url: str) -> S3Lake:
    return _s3_lake_at(url, endpoint_url(), region())


@cache
def _s3_lake_at(url: str, endpoint: str | None, region_name: str) -> S3Lake:
    """One per process and setting (the environment's endpoint and region are part of it)."""
    return S3Lake(url, LAKE_URL_ENV)
