"""The analysts' marts on disk: the last good build, the build copy beside it, the swap, and their copy into
analytics.duckdb.

dbt (the project in marts/) never writes the file analysts read, nor the warehouse: it builds into a copy of
the last good marts (`.marts-build.duckdb`, so kol_history's incremental rows build on the previous night's),
reading a copy of the warehouse (`.marts-source.duckdb`) made under the writer lock, so that the warehouse's
writers (a webhook event's apply among them) go on while dbt builds. Only a build whose ERROR tests all passed
is renamed over `marts.duckdb`; a failed one is deleted, and analysts keep the last good marts. A build, an
erasure and retention change the marts one at a time (the marts lock, taken before the writer lock wherever
both are held). Publishing (WarehouseResource.publish_analytics) copies the marts' tables, comments included,
into analytics.duckdb beside the warehouse's.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from file_modes import DATA_GROUP_ENV, GROUP_READ_UMASK, OWNER_ONLY_UMASK
from resources.files import holding_lock
from resources.sql import sql_literal

MARTS_FILE = "marts.duckdb"  # the last good marts, swapped in whole
BUILD_FILE = ".marts-build.duckdb"  # the build in progress
SOURCE_FILE = ".marts-source.duckdb"  # the warehouse as the build in progress reads it
# What marts/profiles.yml's `pipeline` target says when its variable is unset: paths relative to the data directory.
PROFILE_DEFAULTS = {"COMMOPS_MARTS_BUILD_PATH": BUILD_FILE, "COMMOPS_MARTS_WAREHOUSE_PATH": SOURCE_FILE,
                    "COMMOPS_MARTS_DATA_DIR": ".", "COMMOPS_MARTS_MEMORY_LIMIT": "1GB", "COMMOPS_MARTS_THREADS": "2"}
DBT_TARGET = ".marts-dbt"  # dbt's log and compiled SQL of the last build
# The build as the marts step runs it. No manifest.json or run_results.json: nothing reads them (dagster-dbt takes
# dbt's events), and dbt wrote the manifest twice a build, about 0.5 s of its fixed cost.
BUILD_ARGS = ("build", "--target", "pipeline", "--exclude-resource-type", "unit_test", "--no-write-json")
MARTS_DATABASE = "marts"  # its name when attached to the analytics copy


class MartsResource(dg.ConfigurableResource):
    """Where the marts are built and kept, and DuckDB's settings for the build."""

    data_dir: str
    # The marts join whole tables (1M KOLs with their details, engagement and CRM rows): more room than a merge.
    memory_limit: str = "1GB"
    threads: int = 2

    @property
    def path(self) -> Path:
        return Path(self.data_dir) / MARTS_FILE

    @property
    def build_path(self) -> Path:
        return Path(self.data_dir) / BUILD_FILE

    @property
    def source_path(self) -> Path:
        return Path(self.data_dir) / SOURCE_FILE

    @property
    def dbt_target_path(self) -> Path:
        return Path(self.data_dir) / DBT_TARGET

    @property
    def lock_path(self) -> Path:
        return Path(self.data_dir) / "locks" / "marts.lock"

    @contextmanager
    def changing(self, log: Any = None) -> Iterator[None]:
        """The marts lock, for a build from its start to its swap, or for an erasure or retention changing the
        marts: one at a time. Taken before the warehouse's writer lock wherever both are held."""
        def waiting(holder: str) -> None:
            if log is not None:
                log.info(f"Waiting for the marts lock {self.lock_path} (held by {holder})")

        with holding_lock(self.lock_path, on_wait=waiting):
            yield

    def start_build(self) -> Path:
        """The build copy: the last good marts copied (kol_history grows from them), or a new file."""
        _remove(self.build_path)
        if self.path.exists():
            shutil.copyfile(self.path, self.build_path)
        return self.build_path

    def copy_source(self, warehouse_path: Path) -> Path:
        """The warehouse file (and its WAL) copied for dbt to read; the caller holds the warehouse's writer lock
        for the copy only, not for the build."""
        _remove(self.source_path)
        shutil.copyfile(warehouse_path, self.source_path)
        if Path(f"{warehouse_path}.wal").exists():
            shutil.copyfile(f"{warehouse_path}.wal", f"{self.source_path}.wal")
        return self.source_path

    def discard_source(self) -> None:
        _remove(self.source_path)

    def dbt_environment(self, warehouse_path: Path, *, in_data_dir: bool = True) -> dict[str, str | None]:
        """The variables the dbt project's `pipeline` target reads (marts/profiles.yml), None for one left unset.
        For a dbt run in the data directory (`in_data_dir`), what the profile's relative defaults already say is
        left unset: the profile then reads the same in every data directory, and dbt reuses its parse."""
        values: dict[str, str | None] = {"COMMOPS_MARTS_BUILD_PATH": str(self.build_path),
                                          "COMMOPS_MARTS_WAREHOUSE_PATH": str(warehouse_path),
                                          "COMMOPS_MARTS_DATA_DIR": str(Path(self.data_dir)),
                                          "COMMOPS_MARTS_MEMORY_LIMIT": self.memory_limit,
                                          "COMMOPS_MARTS_THREADS": str(self.threads)}
        if not in_data_dir:
            return values
        said = {name: str(Path(self.data_dir) / default) if name.endswith(("_PATH", "_DIR")) else default
                for name, default in PROFILE_DEFAULTS.items()}
        return {name: None if value == said[name] else value for name, value in values.items()}

    def swap_in(self) -> None:
        """The build becomes the last good marts (an atomic rename: a publish reading the old file keeps it)."""
        with open(self.build_path, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(self.build_path, self.path)

    def tighten(self, folder: Path | None = None) -> None:
        """Give dbt's artifacts (`folder`, default the build's) the modes the project's umask gives: dagster-dbt
        copies dbt's partial parse file in with the mode it has in the project folder."""
        tighten_modes(folder or self.dbt_target_path)

    def discard(self) -> None:
        """The build copy deleted, and the warehouse copy it was built from."""
        _remove(self.build_path)
        _remove(self.source_path)


def _remove(database: Path) -> None:
    database.unlink(missing_ok=True)
    Path(f"{database}.wal").unlink(missing_ok=True)


def tighten_modes(folder: Path) -> None:
    """Every file and folder under `folder` (and itself) stripped of the mode bits the project's umask withholds."""
    if not folder.exists():
        return
    withheld = GROUP_READ_UMASK if os.environ.get(DATA_GROUP_ENV) else OWNER_ONLY_UMASK
    for path in [folder, *folder.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & withheld and not path.is_symlink():
            os.chmod(path, mode & ~withheld)


def copy_marts_into(conn: duckdb.DuckDBPyConnection, marts_path: Path) -> list[str]:
    """Copy every table of the marts file (not the staging views: they read the warehouse by another name)
    into `conn`'s database, with their comments; returns the tables copied. Nothing when no build succeeded yet."""
    if not marts_path.exists():
        return []
    conn.execute(f"ATTACH {sql_literal(str(marts_path))} AS {MARTS_DATABASE} (READ_ONLY)")
    try:
        tables = conn.execute(
            "SELECT table_name, comment FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
            "ORDER BY table_name", [MARTS_DATABASE]).fetchall()
        for table, comment in tables:
            conn.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT * FROM {MARTS_DATABASE}.main."{table}"')
            if comment:
                conn.execute(f'COMMENT ON TABLE "{table}" IS {sql_literal(comment)}')
            for column, column_comment in conn.execute(
                    "SELECT column_name, comment FROM duckdb_columns() WHERE database_name = ? AND table_name = ? "
                    "AND comment IS NOT NULL", [MARTS_DATABASE, table]).fetchall():
                conn.execute(f'COMMENT ON COLUMN "{table}"."{column}" IS {sql_literal(column_comment)}')
    finally:
        conn.execute(f"DETACH {MARTS_DATABASE}")
    return [table for table, _ in tables]
