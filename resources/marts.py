"""The analysts' marts on disk: the last good build, the build copy beside it, the swap, and their copy into
analytics.duckdb.

dbt (the project in marts/) never writes the file analysts read, nor the warehouse: it builds into a copy of
the last good marts (`.marts-build.duckdb`, so kol_history's incremental rows build on the previous night's),
reading the warehouse attached read-only under the writer lock. Only a build whose ERROR tests all passed is
renamed over `marts.duckdb`; a failed one is deleted, and analysts keep the last good marts. Publishing
(WarehouseResource.publish_analytics) copies the marts' tables, comments included, into analytics.duckdb
beside the warehouse's.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import dagster as dg
import duckdb

from file_modes import DATA_GROUP_ENV, GROUP_READ_UMASK, OWNER_ONLY_UMASK
from resources.sql import sql_literal

MARTS_FILE = "marts.duckdb"  # the last good marts, swapped in whole
BUILD_FILE = ".marts-build.duckdb"  # the build in progress
# What marts/profiles.yml's `pipeline` target says when its variable is unset: paths relative to the data directory.
PROFILE_DEFAULTS = {"COMMOPS_MARTS_BUILD_PATH": BUILD_FILE, "COMMOPS_MARTS_WAREHOUSE_PATH": "warehouse.duckdb",
                    "COMMOPS_MARTS_DATA_DIR": ".", "COMMOPS_MARTS_MEMORY_LIMIT": "1GB", "COMMOPS_MARTS_THREADS": "2"}
DBT_TARGET = ".marts-dbt"  # dbt's log and compiled SQL of the last build
# The build as the marts step runs it. No manifest.json or run_results.json: nothing reads them (dagster-dbt takes
# dbt's events), and dbt wrote the manifest twice a build, about 1 s of its fixed cost.
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
    def dbt_target_path(self) -> Path:
        return Path(self.data_dir) / DBT_TARGET

    def start_build(self) -> Path:
        """The build copy: the last good marts copied (kol_history grows from them), or a new file."""
        self.build_path.unlink(missing_ok=True)
        Path(f"{self.build_path}.wal").unlink(missing_ok=True)
        if self.path.exists():
            shutil.copyfile(self.path, self.build_path)
        return self.build_path

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
        self.build_path.unlink(missing_ok=True)
        Path(f"{self.build_path}.wal").unlink(missing_ok=True)


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
