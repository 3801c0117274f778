"""The stores of personal data on object storage, beside a data directory's own (privacy/stores.py), each
able to `locate` and `erase` one person, crash-safe and idempotent, and to apply retention:

- the lake on S3 (COMMOPS_LAKE_URL): each committed snapshot file downloaded (streamed) into the local
  staging area and scanned; only those holding the person are rewritten without their rows (same schema)
  and published as a new run of their snapshot (uploaded first, then committed by its manifest, the old
  run deleted: resources/lake_s3.py). Killed halfway, the next run's sweep removes what was left and the
  scan finds what is still to do;
- the Iceberg tables (COMMOPS_ICEBERG_CATALOG_URL, COMMOPS_ICEBERG_WAREHOUSE): every data file of every
  snapshot scanned once; the person's rows deleted from the current snapshot (pyiceberg's delete with a
  filter naming those rows), then every older snapshot referencing a file that holds them expired, and the
  files only expired snapshots referenced (data files, manifests, manifest lists) deleted. pyiceberg's
  expiry removes metadata only, so that last step is ours: the files to delete are written to a journal in
  the data directory before the expiry commits, and a run finding a journal first deletes those of its files
  no live snapshot references. Retention expires the snapshots older than the setting the same way.

Reading is DuckDB over local files (never a dataset in Python objects); only row numbers come back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from datetime import date, datetime, time, timezone
from pathlib import Path
from typing import Any

from privacy.stores import (FILE_WORKERS, Finding, org_of_path, parquet_rows_of, replace_durably, scan_connect,
                            subject_predicate, write_parquet_without)
from privacy.subject import Subject
from resources.iceberg_deletes import rewrite_without_deletes
from resources.lake import LAKE_URL_ENV, SNAPSHOT_FILE, LakeResource
from resources.lake_s3 import COPY_CHUNK, S3Lake, SnapshotMoved
from resources.settings import ICEBERG_CATALOG_URL_ENV, load_settings
from resources.sql import sql_literal
from resources.warehouse import ORG_COLUMN

REPUBLISH_ATTEMPTS = 3  # a sync published the same snapshot meanwhile: scan its new file, try again


class S3LakeStore:
    """The committed snapshot files of the lake at COMMOPS_LAKE_URL."""

    name = "lake-s3"

    def __init__(self, data_dir: Path, url: str) -> None:
        self.lake = S3Lake(url, LAKE_URL_ENV)
        self.local = LakeResource(data_dir=str(data_dir), url=url)

    def snapshots(self, org: str | None = None) -> list[str]:
        """The committed snapshot folders (relative to the lake); given `org`, that organization's and the
        deployment's own (no org level)."""
        return [folder for folder, _ in self.lake.committed_snapshots()
                if org is None or org_of_path(Path(folder)) in (None, org)]

    def locate(self, subject: Subject) -> list[Finding]:
        return self._each_snapshot(subject, rewrite=False)

    def erase(self, subject: Subject) -> list[Finding]:
        self.local.remove_abandoned_staging()  # what a killed erasure (or sync) left, here and on S3: may hold the person
        return self._each_snapshot(subject, rewrite=True)

    def _each_snapshot(self, subject: Subject, rewrite: bool) -> list[Finding]:
        """Each snapshot on its own (downloaded, scanned, and rewritten and published again if it holds the
        person), FILE_WORKERS at a time."""
        folders = self.snapshots(subject.org)
        with ThreadPoolExecutor(FILE_WORKERS, thread_name_prefix="erase-snapshot") as pool:
            counts = list(pool.map(lambda folder: self._snapshot_rows(folder, subject, rewrite), folders))
        return [Finding(self.name, self.lake.snapshot_url(folder), rows)
                for folder, rows in zip(folders, counts, strict=True) if rows]

    def _snapshot_rows(self, folder: str, subject: Subject, rewrite: bool) -> int:
        for attempt in range(1, REPUBLISH_ATTEMPTS + 1):
            with _staging(self.local) as staging:
                try:
                    manifest = self.lake.download(folder, staging / SNAPSHOT_FILE)
                except FileNotFoundError:
                    return 0  # removed meanwhile (retention)
                drop = parquet_rows_of(staging / SNAPSHOT_FILE, subject)
                if not drop or not rewrite:
                    return len(drop)
                kept = write_parquet_without(staging / SNAPSHOT_FILE, staging / f"erased-{SNAPSHOT_FILE}", drop)
                (staging / f"erased-{SNAPSHOT_FILE}").replace(staging / SNAPSHOT_FILE)  # the object keeps its name
                try:
                    self.lake.publish(staging / SNAPSHOT_FILE, folder, kept, replacing=manifest.run)
                    return len(drop)
                except SnapshotMoved:
                    if attempt == REPUBLISH_ATTEMPTS:
                        raise
        raise AssertionError("unreachable")

    def expire(self, cutoff: date, keep: int) -> list[str]:
        """Snapshots dated before `cutoff` removed, except each resource's newest `keep` dates; their URLs."""
        self.lake.remove_abandoned()
        by_resource: dict[str, list[str]] = {}
        for folder in self.snapshots():
            by_resource.setdefault(folder.rsplit("/snapshot_date=", 1)[0], []).append(folder)
        removed = []
        for folders in by_resource.values():
            for folder in sorted(folders, reverse=True)[keep:]:
                if folder.rsplit("=", 1)[1] < cutoff.isoformat() and self.lake.remove_snapshot(folder):
                    removed.append(self.lake.snapshot_url(folder))
        return removed


JOURNAL_DIR = ".iceberg-expiry"  # under the data directory: the files an expiry is about to orphan (paths only)


class IcebergTables:
    """Every table of the Iceberg namespace the analytics publish writes (resources/iceberg.py)."""

    name = "iceberg"

    def __init__(self, data_dir: Path, catalog_url: str, warehouse: str, namespace: str) -> None:
        self.data_dir = data_dir
        self.catalog_url, self.warehouse, self.namespace = catalog_url, warehouse, namespace
        self.local = LakeResource(data_dir=str(data_dir))

    def _tables(self) -> Iterator[Any]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        from resources.iceberg import open_catalog

        catalog = open_catalog(self.catalog_url, self.warehouse)
        try:
            identifiers = catalog.list_tables(self.namespace)
        except NoSuchNamespaceError:
            return
        for identifier in sorted(identifiers):
            yield catalog.load_table(identifier)

    def locate(self, subject: Subject) -> list[Finding]:
        found = []
        for table in self._tables():
            with _staging(self.local) as staging:
                holding = _holding_files(table, subject, staging)
                found += self._findings(table, holding)
        return found

    def erase(self, subject: Subject) -> list[Finding]:
        self.local.remove_abandoned_staging()  # a killed run's copies of data files
        return [finding for table in self._tables() for finding in _retrying(self._erase_table, table, subject)]

    def _erase_table(self, table: Any, subject: Subject) -> list[Finding]:
        self._finish_journal(table)
        with _staging(self.local) as staging:
            holding = _holding_files(table, subject, staging)
            found = self._findings(table, holding)
            if rewrite_without_deletes(table, set(holding)):  # a replaced version of the person, deleted by position
                table = table.refresh()
                holding = _holding_files(table, subject, staging)
            current = table.current_snapshot()
            in_current = [p for p in _data_files(table, current) if p in holding] if current else []
            if in_current:
                _delete_rows(table, subject, [holding[p][1] for p in in_current])
                table = table.refresh()
        if holding and table.current_snapshot() is not None \
                and any(p in holding for p in _data_files(table, table.current_snapshot(), deleted=True)):
            # The delete's manifest lists the files it dropped, with their column bounds (the person's
            # values): a commit of no data leaves that manifest out, so the snapshot holding it can expire.
            with table.transaction() as transaction, transaction.update_snapshot().fast_append():
                pass
            table = table.refresh()
        live = table.current_snapshot().snapshot_id if table.current_snapshot() else None
        self._expire(table, [s.snapshot_id for s in table.snapshots() if s.snapshot_id != live
                             and any(p in holding for p in _data_files(table, s, deleted=True))])
        return found

    def expire_older_than(self, cutoff: date) -> int:
        """Every table's snapshots taken before `cutoff` (never the current one) expired, their files deleted;
        the number of snapshots expired."""
        limit = datetime.combine(cutoff, time(), timezone.utc).timestamp() * 1000
        return sum(_retrying(self._expire_table, table, limit) for table in self._tables())

    def _expire_table(self, table: Any, limit: float) -> int:
        self._finish_journal(table)
        live = table.current_snapshot().snapshot_id if table.current_snapshot() else None
        old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != live and s.timestamp_ms < limit]
        self._expire(table, old)
        return len(old)

    def _findings(self, table: Any, holding: dict[str, tuple[int, Path]]) -> list[Finding]:
        """The person's rows in the current snapshot, and in each older snapshot still holding them."""
        name = ".".join(table.name())
        current = table.current_snapshot()
        found = []
        for snapshot in table.snapshots():
            rows = sum(holding[p][0] for p in _data_files(table, snapshot) if p in holding)
            if rows:
                is_current = current is not None and snapshot.snapshot_id == current.snapshot_id
                found.append(Finding(self.name, name if is_current else f"{name}@snapshot {snapshot.snapshot_id}", rows))
        return found

    def _expire(self, table: Any, snapshot_ids: list[int]) -> None:
        """Expire the snapshots, then delete the files only they referenced (journaled first: see the module)."""
        if not snapshot_ids:
            return
        expiring = set(snapshot_ids)
        orphaned = set().union(*(_referenced(table, s) for s in table.snapshots() if s.snapshot_id in expiring))
        orphaned -= set().union(*(_referenced(table, s) for s in table.snapshots() if s.snapshot_id not in expiring))
        journal = self._journal(table)
        journal.parent.mkdir(mode=0o700, exist_ok=True)
        temp = journal.with_name(f".{journal.name}.{os.getpid()}")
        temp.write_text(json.dumps(sorted(orphaned)))
        replace_durably(temp, journal)
        table.maintenance.expire_snapshots().by_ids(sorted(expiring)).commit()
        self._finish_journal(table.refresh())

    def _finish_journal(self, table: Any) -> None:
        """Delete the journaled files that no live snapshot references (an expiry that never committed
        leaves them all referenced), then the journal."""
        journal = self._journal(table)
        if not journal.exists():
            return
        live = set().union(set(), *(_referenced(table, s) for s in table.snapshots()))
        for path in json.loads(journal.read_text()):
            if path not in live:
                try:
                    table.io.delete(path)
                except FileNotFoundError:
                    pass  # deleted by the run that was killed
        journal.unlink()

    def _journal(self, table: Any) -> Path:
        return self.data_dir / JOURNAL_DIR / f"{'.'.join(table.name())}.json"



def _retrying(step, table: Any, *args: Any) -> Any:
    """`step(table, *args)`, done again on the table as it now is when another writer (a publish) committed
    first: each step is idempotent, and the publish turns pyiceberg's own retry off (resources/iceberg.py)."""
    from pyiceberg.exceptions import CommitFailedException

    from resources.iceberg import COMMIT_ATTEMPTS

    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            return step(table, *args)
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS:
                raise
            table = table.refresh()
    raise AssertionError("unreachable")


@contextmanager
def _staging(lake: LakeResource) -> Iterator[Path]:
    """A private directory in the local lake's staging area (a killed run's is swept by the next run)."""
    staging = lake.new_staging_dir(None, "privacy", date.today().isoformat())
    try:
        yield staging
    finally:
        lake.discard(staging)


def _data_files(table: Any, snapshot: Any, deleted: bool = False) -> list[str]:
    """The data files a snapshot reads; with `deleted`, also those its manifests record as deleted."""
    return [entry.data_file.file_path for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=not deleted)]


def _referenced(table: Any, snapshot: Any) -> set[str]:
    """Every file a snapshot reads: its manifest list, its manifests and their live data files."""
    manifests = snapshot.manifests(table.io)
    return {snapshot.manifest_list, *(m.manifest_path for m in manifests),
            *(e.data_file.file_path for m in manifests for e in m.fetch_manifest_entry(table.io, discard_deleted=True))}


def _holding_files(table: Any, subject: Subject, staging: Path) -> dict[str, tuple[int, Path]]:
    """The data files of any snapshot holding the person: their rows of the person and a local copy."""
    holding: dict[str, tuple[int, Path]] = {}
    seen: set[str] = set()
    for snapshot in table.snapshots():
        for path in _data_files(table, snapshot):
            if path in seen:
                continue
            seen.add(path)
            local = staging / f"{len(seen)}.parquet"
            with table.io.new_input(path).open() as source, open(local, "wb") as target:
                while chunk := source.read(COPY_CHUNK):
                    target.write(chunk)
            rows = len(parquet_rows_of(local, subject))
            if rows:
                holding[path] = (rows, local)
            else:
                local.unlink()
    return holding


def _delete_rows(table: Any, subject: Subject, files: list[Path]) -> None:
    """Delete the person's rows of the current snapshot: each named by its org and key (a parent table of the
    publish), or by its org and every text column (any other table)."""
    from pyiceberg.expressions import AlwaysFalse, And, EqualTo, IsNull, Or
    from pyiceberg.types import StringType

    from sync.catalog import ICEBERG_TABLES

    keys = {spec.table: spec.key for spec in ICEBERG_TABLES}
    name = table.name()[-1]
    columns = [ORG_COLUMN, keys[name]] if name in keys else [
        f.name for f in table.schema().fields if isinstance(f.field_type, StringType)]
    relation = f"read_parquet([{', '.join(sql_literal(str(p)) for p in files)}], union_by_name = true)"
    with closing(scan_connect()) as conn:
        hit = subject_predicate(conn, relation, subject, org_column=ORG_COLUMN in columns)
        rows = conn.execute(f"SELECT DISTINCT {', '.join(columns)} FROM {relation} t WHERE {hit}").fetchall()
    condition = AlwaysFalse()
    for row in rows:
        terms = [IsNull(c) if v is None else EqualTo(c, v) for c, v in zip(columns, row, strict=True)]
        condition = Or(condition, And(*terms) if len(terms) > 1 else terms[0])
    table.delete(condition)


def s3_lake(data_dir: Path) -> S3LakeStore | None:
    url = load_settings().lake_url
    return S3LakeStore(data_dir, url) if url else None


def iceberg_tables(data_dir: Path) -> IcebergTables | None:
    settings = load_settings()
    catalog_url = os.environ.get(ICEBERG_CATALOG_URL_ENV)
    if not catalog_url and not settings.iceberg_warehouse:
        return None
    return IcebergTables(data_dir, catalog_url, settings.iceberg_warehouse, settings.iceberg_namespace)


def object_stores(data_dir: Path) -> list:
    """The stores on object storage this deployment has set (none by default)."""
    return [store for store in (s3_lake(data_dir), iceberg_tables(data_dir)) if store is not None]
