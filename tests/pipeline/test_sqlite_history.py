"""The embedded instance's run history (Dagster's SQLite storage) commits without waiting for the disk, every one of
its databases and no other SQLite file, and what it commits survives the process being killed."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import sqlalchemy

from pipelines.sqlite_history import is_dagster_history, relax_history_commits

REPO = Path(__file__).resolve().parents[2]
NORMAL, FULL = 1, 2

KILLED_AFTER_A_RUN = """
import os, signal, sys
import dagster as dg
from pipelines.sqlite_history import relax_history_commits

@dg.asset
def night() -> int:
    return 1

relax_history_commits()
instance = dg.DagsterInstance.from_config(sys.argv[1])
result = dg.materialize([night], instance=instance)
print(result.run_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: the history is in the databases' write-ahead logs
"""


@dg.asset
def night() -> int:
    return 1


def pragma(path: Path, name: str) -> object:
    """PRAGMA `name` on a connection to `path` made as Dagster makes its own (SQLAlchemy)."""
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(f"PRAGMA {name}").scalar()
    finally:
        engine.dispose()


def test_every_database_of_the_embedded_instance_commits_without_a_sync_and_other_sqlite_files_keep_theirs(tmp_path):
    relax_history_commits()
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert dg.materialize([night], instance=instance).success
    finally:
        instance.dispose()

    databases = sorted(home.rglob("*.db"))
    names = {str(path.relative_to(home)) for path in databases}
    assert {"history/runs.db", "history/runs/index.db", "schedules/schedules.db"} <= names, names
    assert [path for path in databases if not is_dagster_history(path)] == []
    assert {path.name: pragma(path, "synchronous") for path in databases} == {path.name: NORMAL for path in databases}

    outside = (tmp_path / "history.db", tmp_path / "runs" / "runs.db", tmp_path / "history" / "notes.db")
    for other in outside:  # SQLite files outside Dagster's layout
        other.parent.mkdir(exist_ok=True)
        assert pragma(other, "synchronous") == FULL, other


def test_a_run_stored_by_a_process_killed_right_after_is_whole_in_the_history(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_A_RUN, str(home)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_id = killed.stdout.split()[-1]

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        events = {record.event_log_entry.dagster_event_type for record in instance.get_records_for_run(run_id).records}
        assert {dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.RUN_SUCCESS} <= events
        assert instance.get_latest_materialization_event(dg.AssetKey("night")) is not None
    finally:
        instance.dispose()
    for path in home.rglob("*.db"):
        assert pragma(path, "integrity_check") == "ok", path
