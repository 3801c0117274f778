"""Where the sync writes: the Parquet lake and the DuckDB warehouse (lock, connections, publish).

One writer at a time: Dagster's "warehouse" pool serialises queued runs, but runs executed
in-process (`commops sync`, `materialize`) bypass the queue, so `WarehouseResource.writer`
also takes an OS file lock and waits for it. After each successful write the warehouse is
checkpointed, closed and copied to analytics.duckdb with an atomic rename: analysts hold
that copy open, never the file the sync writes.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

WAREHOUSE_FILE = "warehouse.duckdb"
ANALYTICS_FILE = "analytics.duckdb"
LOCK_FILE = "warehouse.lock"
STAGING_DIR = ".staging"

# Also a plain Python logger, so in-process runs (`commops sync`) can show lock waits on the terminal.
_logger = logging.getLogger("commops.warehouse")


def _info(log: Any, message: str) -> None:
    _logger.info(message)
    if log is not None:
        log.info(message)


def _pid_alive(pid: int) -> bool:
    """Whether a process of this pid exists (a leftover naming a live pid may still be in use)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LakeResource(dg.ConfigurableResource):
    """Parquet snapshots under <data_dir>/lake/<resource>/snapshot_date=YYYY-MM-DD/."""

    data_dir: str

    @property
    def root(self) -> Path:
        return Path(self.data_dir) / "lake"

    def snapshot_dir(self, resource: str, snapshot_date: str) -> Path:
        return self.root / resource / f"snapshot_date={snapshot_date}"

    def glob(self, resource: str) -> str:
        return str(self.root / resource / "snapshot_date=*" / "*.parquet")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.remove_abandoned_staging()

    def new_staging_dir(self, resource: str, snapshot_date: str) -> Path:
        """A private directory on the lake's filesystem (so publishing is a rename)."""
        path = self.root / STAGING_DIR / f"{resource}-{snapshot_date}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    def remove_abandoned_staging(self) -> None:
        """Staging directories of processes that died (a killed sync) are deleted."""
        staging = self.root / STAGING_DIR
        if not staging.is_dir():
            return
        for entry in staging.iterdir():
            parts = entry.name.rsplit("-", 2)
            if len(parts) == 3 and parts[1].isdigit() and not _pid_alive(int(parts[1])):
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
            _fsync_dir(final.parent)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
        return final


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file, its writer lock and the analysts' published copy."""

    data_dir: str
    memory_limit: str = "128MB"  # DuckDB spills beyond it: keeps the sync process small
    threads: int = 2

    @property
    def path(self) -> Path:
        return Path(self.data_dir) / WAREHOUSE_FILE

    @property
    def analytics_path(self) -> Path:
        return Path(self.data_dir) / ANALYTICS_FILE

    @property
    def lock_path(self) -> Path:
        return Path(self.data_dir) / LOCK_FILE

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.remove_abandoned_copies()

    def remove_abandoned_copies(self) -> None:
        """Half-written analytics copies of processes that died (a sync killed while publishing)."""
        for temp in Path(self.data_dir).glob(f".{ANALYTICS_FILE}.*.tmp"):
            pid = temp.name.split(".")[-3]
            if pid.isdigit() and not _pid_alive(int(pid)):
                temp.unlink(missing_ok=True)

    @contextmanager
    def writer(self, log: Any = None, publish: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
        """Exclusive read-write connection; on success the write is published to analytics.duckdb."""
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        with self._exclusive_lock(log):
            conn = duckdb.connect(str(self.path), config={"memory_limit": self.memory_limit, "threads": self.threads})
            try:
                conn.execute("SET preserve_insertion_order = false")
                yield conn
                conn.execute("CHECKPOINT")
            finally:
                conn.close()
            if publish:
                self.publish_analytics(log)

    def publish_analytics(self, log: Any = None) -> None:
        """Copy the closed warehouse file to analytics.duckdb atomically.

        An analyst holding the old analytics.duckdb keeps reading the old inode undisturbed;
        a new connection opens the new file.
        """
        temp = self.analytics_path.with_name(f".{ANALYTICS_FILE}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            shutil.copyfile(self.path, temp)
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(temp, self.analytics_path)
        finally:
            temp.unlink(missing_ok=True)
        if log is not None:
            log.info(f"Published {self.analytics_path} for analysts")  # Dagster log only

    @contextmanager
    def _exclusive_lock(self, log: Any) -> Iterator[None]:
        with open(self.lock_path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                _info(log, f"Waiting for the warehouse lock {self.lock_path} (held by {holder}): another sync is writing")
                started = time.monotonic()
                fcntl.flock(handle, fcntl.LOCK_EX)
                _info(log, f"Got the warehouse lock after {time.monotonic() - started:.1f}s")
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}")
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                handle.flush()
                fcntl.flock(handle, fcntl.LOCK_UN)
