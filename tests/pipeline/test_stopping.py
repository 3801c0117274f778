"""Every long-running command stops on SIGTERM (what systemd, `docker stop` and `kill` send): it exits,
every process it started is gone and its ports are free within 30 s. (`demo --serve`: test_demo.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from http_serving.sockets import free_port
from tests.processes import answers, assert_stops_on_sigterm, descendants, wait_for_url
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def _start(*args: str, data_dir: Path, log: Path) -> subprocess.Popen:
    """The command, from the repo root, its output (stdout and stderr) in `log`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env["COMMOPS_DATA_DIR"] = str(data_dir)
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "commops_cli", *args], env=env, cwd=REPO,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


def test_sigterm_stops_service_run_and_frees_its_port(tmp_path):
    port = free_port()
    log = tmp_path / "service.log"
    service = _start("service", "run", "--db", str(tmp_path / "service.db"), "--port", str(port), data_dir=tmp_path,
                     log=log)
    wait_for_url(service, f"http://127.0.0.1:{port}/v1/openapi.json", 60, log)
    assert_stops_on_sigterm(service, [port])


def test_sigterm_stops_receiver_run_and_frees_its_port(tmp_path):
    port = free_port()
    log = tmp_path / "receiver.log"
    receiver = _start("receiver", "run", "--port", str(port), data_dir=tmp_path, log=log)
    wait_for_url(receiver, f"http://127.0.0.1:{port}/healthz", 60, log)
    assert_stops_on_sigterm(receiver, [port])


def test_sigterm_to_commops_ui_stops_dagster_dev_all_it_started_and_the_local_service_and_it_warned_nothing(tmp_path):
    """Run from the repo root, `commops ui` starts without Dagster's warnings: `dagster dev` warned that it is
    superseded by `dg dev`, and, run beside the repo's dagster.yaml with DAGSTER_HOME elsewhere, that the file
    "will not be used"."""
    ui_port, service_port = free_port(), free_port()
    log = tmp_path / "ui.log"
    ui = _start("ui", "--port", str(ui_port), "--service-port", str(service_port), data_dir=tmp_path / "data", log=log)
    try:
        wait_for_url(ui, f"http://127.0.0.1:{ui_port}/server_info", 180, log)  # a cold dagster dev on a loaded machine
        assert answers(service_port)
        # webserver, daemon, code server and its gRPC server: all started by then
        wait_until(lambda: len(descendants(ui.pid)) >= 4, 60, 0.2, what="dagster dev's processes")
        assert_stops_on_sigterm(ui, [ui_port, service_port])
    finally:
        if ui.poll() is None:
            ui.kill()
        ui.wait()
    output = log.read_text()
    assert "SupersessionWarning" not in output and "superseded" not in output, output
    assert "will not be used" not in output, output
