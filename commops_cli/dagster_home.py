"""One Dagster home for `commops sync`, `demo` and `ui`: $DAGSTER_HOME, else $COMMOPS_DATA_DIR/dagster_home.

The CLI's in-process runs and the UI read and write the same run storage, so the UI shows what
the CLI did. The instance configuration this package ships (commops_cli/dagster.yaml: run queue
limits, the warehouse pool) is installed there when the home is ours; a DAGSTER_HOME set by a
deployment keeps its own configuration.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

import dagster as dg

from file_modes import private_dir
from pipelines.sqlite_history import relax_history_commits
from resources.settings import Settings

INSTANCE_CONFIG = files("commops_cli").joinpath("dagster.yaml")


def prepare_home(settings: Settings) -> Path:
    """The Dagster home, created (and configured, when it is under the data directory) if need be; owner-only
    (its run logs and step output)."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    home = private_dir(settings.dagster_home)
    install_config(home)
    return home


def install_config(home: Path) -> None:
    """`home` created if need be, holding the shipped dagster.yaml (rewritten only when it differs)."""
    home.mkdir(parents=True, exist_ok=True)
    config, shipped = home / "dagster.yaml", INSTANCE_CONFIG.read_bytes()
    if not config.exists() or config.read_bytes() != shipped:
        config.write_bytes(shipped)


@contextmanager
def dagster_instance(settings: Settings) -> Iterator[dg.DagsterInstance]:
    relax_history_commits()
    instance = dg.DagsterInstance.from_config(str(prepare_home(settings)))
    try:
        yield instance
    finally:
        instance.dispose()
