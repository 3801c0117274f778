"""Start `dagster-daemon run` on this repo's code location as a child process (tests, benchmarks).

The daemon evaluates webhook_events_sensor and launches apply_webhook_events runs (each in its own
process) exactly as `dagster dev` does, without the UI.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.cli.dagster_home import REPO_CONFIG

REPO = REPO_CONFIG.parent


@contextmanager
def running_daemon(dagster_home: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`dagster-daemon run -w workspace.yaml` with `env` (COMMOPS_*) added, DAGSTER_HOME configured with
    the repo's dagster.yaml; stopped (its process group) on exit."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO_CONFIG, dagster_home / "dagster.yaml")
    daemon = Path(sys.executable).with_name("dagster-daemon")
    full_env = {
        **os.environ,
        **env,
        "DAGSTER_HOME": str(dagster_home),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [str(daemon), "run", "-w", str(REPO / "workspace.yaml")],
            cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
