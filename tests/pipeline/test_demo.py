"""`commops demo`, the README's first command: seed and serve the local service, sync it, reconcile its KOLs with
a local Salesforce stand-in, say where the data and the report are; `demo --serve` keeps the service up until
Ctrl-C or SIGTERM."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import duckdb
import httpx

from http_serving.sockets import free_port
from tests.processes import assert_stops_on_sigterm
from tests.waiting import wait_until

DEMO = [sys.executable, "-m", "commops_cli", "demo", "--kols", "120"]


def _demo(data_dir) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DEMO, "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL, check=False)


def _serving_demo(data_dir, port: int) -> subprocess.CompletedProcess[str]:
    """`demo --serve` until its service answers, then SIGTERM: it stops within 30 s and frees the port."""
    out, err = data_dir / "serve.out", data_dir / "serve.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen([*DEMO, "--data-dir", str(data_dir), "--serve", "--port", str(port)],
                                   stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
    try:
        wait_until(lambda: "stays up" in out.read_text() or process.poll() is not None, 240, 0.2, what="the demo")
        assert process.poll() is None, err.read_text()[-2000:]
        assert httpx.get(f"http://127.0.0.1:{port}/v1/openapi.json", timeout=5).status_code == 200
        assert_stops_on_sigterm(process, [port])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, out.read_text(), err.read_text())


def test_demo_syncs_the_seeded_local_service_and_a_second_run_reuses_it(tmp_path):
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Seeding the local service" in first.stdout
    assert "analytics.duckdb" in first.stdout
    closing = first.stdout.strip().splitlines()[-1]  # its addresses are dead once it exits: says so, and what to run
    assert "answer no more" in closing and "commops demo --serve" in closing and "commops ui" in closing

    report = tmp_path / "reports" / "reconciliation" / "latest.html"
    assert report.is_file()
    assert "Report:" in first.stdout and "reconciliation-" in first.stdout  # where the report is

    with duckdb.connect(str(tmp_path / "analytics.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM kols").fetchone()[0] == 120
        assert conn.execute("SELECT count(*) FROM kol_details").fetchone()[0] > 0
        statuses = dict(conn.execute("SELECT status, count(*) FROM kol_crm_reconciliation WHERE kol_primary GROUP BY 1").fetchall())
        active = conn.execute("SELECT count(*) FROM kols WHERE is_archived IS NOT TRUE").fetchone()[0]
        assert sum(statuses.values()) == active and statuses["matched"] > 0 and statuses["missing_in_crm"] > 0
    credentials = tmp_path / "service" / "demo-credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600  # the API key is readable by its owner only

    second = _serving_demo(tmp_path, free_port())  # with --serve: up until SIGTERM, then everything stops
    assert "Seeding the local service" not in second.stdout  # same database, same key
    api_key = json.loads(credentials.read_text())["api_key"]
    assert api_key not in first.stdout + first.stderr + second.stdout + second.stderr  # never printed
    sandbox_env = tmp_path / "crm-sandbox" / "salesforce.env"
    assert stat.S_IMODE(sandbox_env.stat().st_mode) == 0o600
    password = dict(line.split("=", 1) for line in sandbox_env.read_text().splitlines())["SALESFORCE_PASSWORD"]
    assert password not in second.stdout + second.stderr
