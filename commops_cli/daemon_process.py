"""Start `dagster-daemon run` on this repo's code location as a child process (tests, benchmarks),
and any other long-lived Dagster process (`running_process`: a code server, a webserver).

The daemon evaluates webhook_events_sensor and launches apply_webhook_events runs (each in its own
process) exactly as `dagster dev` does, without the UI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from file_modes import private_dir
from commops_cli.dagster_home import install_config
from commops_cli.processes import start_group, stop_group

REPO = Path(__file__).resolve().parents[1]  # the checkout the tests and benchmarks run from


@contextmanager
def running_daemon(dagster_home: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`dagster-daemon run -w workspace.yaml` with `env` (COMMOPS_*) added, DAGSTER_HOME configured with
    the shipped dagster.yaml; stopped on exit with every run process it started (its process group)."""
    install_config(private_dir(dagster_home))
    daemon = Path(sys.executable).with_name("dagster-daemon")
    full_env = {
        **os.environ,
        **env,
        "DAGSTER_HOME": str(dagster_home),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with running_process([str(daemon), "run", "-w", str(REPO / "workspace.yaml")], full_env, log) as process:
        yield process


@contextmanager
def running_process(command: list[str], env: dict[str, str], log: Path, cwd: Path = REPO) -> Iterator[subprocess.Popen]:
    """`command` in a process group of its own, output appended to `log`; on exit the whole group
    (the process and its children, e.g. a code server's run workers) gets SIGTERM, then SIGKILL."""
    with open(log, "ab") as out:
        process = start_group(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        stop_group(process)
