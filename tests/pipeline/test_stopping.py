"""Every long-running command stops on SIGTERM (what systemd, `docker stop` and `kill` send): it exits,
every process it started is gone and its ports are free within 30 s. (`demo --serve`: test_demo.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from http_serving.sockets import free_port
from tests.processes import answers, assert_stops_on_sigterm, descendants
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def _start(*args: str, data_dir: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env["COMMOPS_DATA_DIR"] = str(data_dir)
    return subprocess.Popen([sys.executable, "-m", "commops_cli", *args], env=env, cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(process: subprocess.Popen, url: str, timeout: float) -> None:
    def up() -> bool:
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout, 0.2, what=f"{url} to answer")


def test_sigterm_stops_service_run_and_frees_its_port(tmp_path):
    port = free_port()
    service = _start("service", "run", "--db", str(tmp_path / "service.db"), "--port", str(port), data_dir=tmp_path)
    _wait_for(service, f"http://127.0.0.1:{port}/v1/openapi.json", 60)
    assert_stops_on_sigterm(service, [port])


def test_sigterm_stops_receiver_run_and_frees_its_port(tmp_path):
    port = free_port()
    receiver = _start("receiver", "run", "--port", str(port), data_dir=tmp_path)
    _wait_for(receiver, f"http://127.0.0.1:{port}/healthz", 60)
    assert_stops_on_sigterm(receiver, [port])


def test_sigterm_to_commops_ui_stops_dagster_dev_all_it_started_and_the_local_service(tmp_path):
    ui_port, service_port = free_port(), free_port()
    ui = _start("ui", "--port", str(ui_port), "--service-port", str(service_port), data_dir=tmp_path / "data")
    try:
        _wait_for(ui, f"http://127.0.0.1:{ui_port}/server_info", 180)  # a cold dagster dev on a loaded machine
        assert answers(service_port)
        # webserver, daemon, code server and its gRPC server: all started by then
        wait_until(lambda: len(descendants(ui.pid)) >= 4, 60, 0.2, what="dagster dev's processes")
        assert_stops_on_sigterm(ui, [ui_port, service_port])
    finally:
        if ui.poll() is None:
            ui.kill()
        ui.wait()
