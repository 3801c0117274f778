"""The lake on S3-compatible object storage (COMMOPS_LAKE_URL=s3://bucket/prefix): the same hive layout,
published through a manifest, since object stores have no rename.

    <prefix>/org=<org>/<resource>/snapshot_date=<date>/_manifest.json          the commit: names the run's files
    <prefix>/org=<org>/<resource>/snapshot_date=<date>/<run>/data.parquet      written by run <run>
    <prefix>/.staging/<run>.json                                               a marker: this folder may be garbage

Publishing a snapshot (its Parquet file staged and checked on local disk first):
1. a marker for the new run folder (host, pid, time) under `.staging/`;
2. the file uploaded into the run folder;
3. a marker for the folder the current manifest names, if any (it is about to be replaced);
4. `_manifest.json` written: one PUT, atomic for readers. This is the commit;
5. the replaced folder deleted, then both markers.

A reader resolves the snapshot through `_manifest.json` and reads only the files it names, so it sees
the previous snapshot or the new one, never a partial one; a folder no manifest names is invisible.
A run killed anywhere leaves markers; every run starts by sweeping them (`remove_abandoned`): a
marker's folder is deleted when no manifest names it and its writer is gone (on this host: its pid is
dead; from another host, where a pid means nothing: the marker is older than STALE_AFTER), and a
marker whose folder the manifest names is simply dropped.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.dataset as pads
import pyarrow.fs as pafs

from resources.files import pid_alive
from resources.object_store import ObjectStoreError, S3Location, described, s3_filesystem

MANIFEST = "_manifest.json"
MARKERS = ".staging"
STALE_AFTER = timedelta(hours=1)  # a marker from another host this old is abandoned (an upload takes minutes at most)
FORMAT = 1
COPY_CHUNK = 8 * 1024 * 1024  # bytes per read while streaming a file to or from the store


@dataclass(frozen=True)
class Manifest:
    """A committed snapshot: its run and the files of it, relative to the snapshot's folder."""

    run: str
    files: list[str]
    rows: int
    committed_at: str
    format: int = FORMAT


@dataclass(frozen=True)
class Marker:
    """A run folder that may become garbage: written before it exists, removed once it is settled."""

    snapshot: str  # the snapshot's folder, relative to the lake
    run: str
    host: str
    pid: int
    written_at: str

    def abandoned(self, now: datetime) -> bool:
        """Its writer is gone: on this host its process is dead; elsewhere the marker is stale."""
        if self.host == socket.gethostname() and self.pid != os.getpid():
            if not pid_alive(self.pid):
                return True
        return now - datetime.fromisoformat(self.written_at) > STALE_AFTER


class S3Lake:
    """The lake at an s3:// location; `setting` names where the location came from, for error messages."""

    def __init__(self, url: str, setting: str):
        self.location = S3Location.parse(url, setting)
        self.setting = setting
        self.fs = s3_filesystem()

    @property
    def url(self) -> str:
        return self.location.url

    def snapshot_url(self, folder: str) -> str:
        return f"{self.location.url}/{folder}"

    def manifest(self, folder: str) -> Manifest | None:
        """The committed snapshot of `folder` (relative to the lake), None when there is none."""
        try:
            with self.fs.open_input_stream(self.location.join(folder, MANIFEST)) as stream:
                return Manifest(**json.loads(stream.read()))
        except FileNotFoundError:
            return None
        except OSError as error:
            raise described(error, self.location, self.setting) from None

    def publish(self, staged_file: Path, folder: str, rows: int, replacing: str | None = None) -> str:
        """Upload a finished Parquet file as the snapshot of `folder` (replacing the committed one);
        returns the snapshot's URL. Given `replacing` (a run), SnapshotMoved if the committed snapshot is no
        longer that run's when the commit is due (another writer published meanwhile: nothing is replaced)."""
        run = f"run-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        data_file = f"{run}/{staged_file.name}"
        try:
            self._write_marker(folder, run)
            with open(staged_file, "rb") as source, self.fs.open_output_stream(self.location.join(folder, data_file)) as target:
                _copy(source, target)
            replaced = self.manifest(folder)
            if replacing is not None and (replaced is None or replaced.run != replacing):
                self._settle(folder, run)
                raise SnapshotMoved(f"{self.snapshot_url(folder)} was published again meanwhile")
            if replaced is not None:
                self._write_marker(folder, replaced.run)
            manifest = Manifest(run=run, files=[data_file], rows=rows, committed_at=datetime.now(UTC).isoformat())
            self._write(self.location.join(folder, MANIFEST), json.dumps(asdict(manifest)).encode())
        except OSError as error:
            self._settle(folder, run)  # not committed: the folder goes now, not at a later sweep
            raise described(error, self.location, self.setting) from None
        if replaced is not None:
            self._settle(folder, replaced.run)
        self._settle(folder, run)
        return self.snapshot_url(folder)

    def download(self, folder: str, target: Path) -> Manifest:
        """Copy the committed snapshot of `folder` to the local file `target` (streamed, bounded memory).
        FileNotFoundError when there is none."""
        manifest = self.manifest(folder)
        if manifest is None:
            raise FileNotFoundError(self.location.join(folder, MANIFEST))
        if len(manifest.files) != 1:
            raise ValueError(f"{self.snapshot_url(folder)}/{MANIFEST} names {len(manifest.files)} files; this version reads one")
        try:
            with self.fs.open_input_stream(self.location.join(folder, manifest.files[0])) as source, open(target, "wb") as sink:
                _copy(source, sink)
        except OSError as error:
            raise described(error, self.location, self.setting) from None
        return manifest

    def committed_files(self, pattern_parts: tuple[str, ...] = ()) -> list[str]:
        """s3:// URLs of every committed snapshot file under the lake (or under `pattern_parts`, e.g.
        ("org=acme",)): what a history reader scans."""
        return sorted(self.snapshot_url(f"{folder}/{name}")
                      for folder, manifest in self.committed_snapshots(pattern_parts) for name in manifest.files)

    def committed_snapshots(self, pattern_parts: tuple[str, ...] = ()) -> list[tuple[str, Manifest]]:
        """Every committed snapshot under the lake (or under `pattern_parts`): its folder relative to the
        lake, and its manifest; sorted by folder."""
        snapshots = []
        selector = pafs.FileSelector(self.location.join(*pattern_parts), recursive=True, allow_not_found=True)
        for info in self._listing(selector):
            if info.type == pafs.FileType.File and info.base_name == MANIFEST \
                    and not info.path.startswith(self.location.join(MARKERS) + "/"):
                folder = info.path.rsplit("/", 1)[0].removeprefix(self.location.path + "/")
                try:
                    with self.fs.open_input_stream(info.path) as stream:
                        snapshots.append((folder, Manifest(**json.loads(stream.read()))))
                except FileNotFoundError:
                    continue  # removed meanwhile (retention)
        return sorted(snapshots, key=lambda found: found[0])

    def remove_snapshot(self, folder: str) -> bool:
        """Delete the committed snapshot of `folder`: marked first, its manifest deleted (the commit: readers
        no longer see it), then its files and the marker. Killed halfway, the next sweep finishes it.
        False when there was none."""
        manifest = self.manifest(folder)
        if manifest is None:
            return False
        try:
            self._write_marker(folder, manifest.run)
            self._delete_file(self.location.join(folder, MANIFEST))
            self._delete_dir(self.location.join(folder))
            self._delete_file(self._marker_path(manifest.run))
        except OSError as error:
            raise described(error, self.location, self.setting) from None
        return True

    def history(self, resource: str) -> pads.Dataset:
        """Every committed snapshot of `resource` (all organizations) as one Arrow dataset with `org` and
        `snapshot_date` from the folder names: what the `*_history` views are for a local lake. DuckDB
        queries it by its Python name (docs/analysts.md)."""
        files = [url.removeprefix("s3://") for url in self.committed_files()
                 if url.split("/snapshot_date=", 1)[0].endswith(f"/{resource}")]
        return pads.dataset(files, filesystem=self.fs, format="parquet", partitioning="hive",
                            partition_base_dir=self.location.path)

    def remove_abandoned(self) -> list[str]:
        """Sweep the markers (see the module's docstring); returns the run folders deleted. Run first, it is
        also where a missing bucket, a wrong endpoint or rejected credentials stop a run before any paging."""
        now = datetime.now(UTC)
        deleted = []
        selector = pafs.FileSelector(self.location.join(MARKERS), allow_not_found=True)
        for info in self._listing(selector):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                continue
            try:
                with self.fs.open_input_stream(info.path) as stream:
                    marker = Marker(**json.loads(stream.read()))
            except FileNotFoundError:
                continue  # settled by its writer meanwhile
            committed = self.manifest(marker.snapshot)
            if committed is not None and committed.run == marker.run:
                self._delete_file(info.path)
            elif marker.abandoned(now):
                self._delete_dir(self.location.join(marker.snapshot, marker.run))
                self._delete_file(info.path)
                deleted.append(f"{marker.snapshot}/{marker.run}")
        return deleted

    def _listing(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        """The objects `selector` names; a missing bucket (a listing would just be empty), a wrong endpoint or
        rejected credentials raise ObjectStoreError naming the setting."""
        try:
            if self.fs.get_file_info(self.location.bucket).type == pafs.FileType.NotFound:
                raise OSError("NoSuchBucket: the bucket does not exist")
            return self.fs.get_file_info(selector)
        except OSError as error:
            raise described(error, self.location, self.setting) from None

    def _write_marker(self, folder: str, run: str) -> None:
        marker = Marker(snapshot=folder, run=run, host=socket.gethostname(), pid=os.getpid(),
                        written_at=datetime.now(UTC).isoformat())
        self._write(self._marker_path(run), json.dumps(asdict(marker)).encode())

    def _settle(self, folder: str, run: str) -> None:
        """Best effort, after a commit or a failure: delete `run`'s folder unless the manifest names it,
        then its marker. Anything left is the next sweep's."""
        try:
            committed = self.manifest(folder)
            if committed is None or committed.run != run:
                self._delete_dir(self.location.join(folder, run))
            self._delete_file(self._marker_path(run))
        except (OSError, ObjectStoreError):
            pass

    def _marker_path(self, run: str) -> str:
        return self.location.join(MARKERS, f"{run}.json")

    def _write(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as stream:
            stream.write(data)

    def _delete_dir(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass

    def _delete_file(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass


class SnapshotMoved(Exception):
    """A conditional publish found another run committed meanwhile."""


def _copy(source, target) -> None:
    """Stream a file in chunks (memory stays bounded) on the calling thread. Not pyarrow.fs.copy_files: it
    runs on the IO thread pool, where it has deadlocked before (apache/arrow#15233)."""
    while chunk := source.read(COPY_CHUNK):
        target.write(chunk)
