"""One Dagster home for `commops sync`, `demo` and `ui`: $DAGSTER_HOME, else $COMMOPS_DATA_DIR/dagster_home.

The CLI's in-process runs and the UI read and write the same run storage, so the UI shows what
the CLI did. The repo's dagster.yaml (run queue limits, the warehouse pool) is installed there
when the home is ours; a DAGSTER_HOME set by a deployment keeps its own configuration.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from file_modes import private_dir
from resources.settings import Settings

REPO_CONFIG = Path(__file__).resolve().parents[2] / "dagster.yaml"


def prepare_home(settings: Settings) -> Path:
    """The Dagster home, created (and configured, when it is under the data directory) if need be; owner-only
    (its run logs and step output)."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    home = private_dir(settings.dagster_home)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_bytes() != REPO_CONFIG.read_bytes():
        shutil.copyfile(REPO_CONFIG, config)
    return home


@contextmanager
def dagster_instance(settings: Settings) -> Iterator[dg.DagsterInstance]:
    instance = dg.DagsterInstance.from_config(str(prepare_home(settings)))
    try:
        yield instance
    finally:
        instance.dispose()
