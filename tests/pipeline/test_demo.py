"""`commops demo`, the README's first command: seed and serve the local service, sync it, reconcile its KOLs with
a local Salesforce stand-in, say where the data and the report are; `demo --serve` keeps the service up until
Ctrl-C or SIGTERM. Then the README's local walkthroughs on the demo's data: its service syncs, and a new KOL
reaches analytics through the receiver. One test walks it all: each step needs the demo's data directory, and
the demo is the suite's most expensive set-up."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import pytest

from http_serving.sockets import free_port
from tests.processes import assert_stops_on_sigterm, wait_for_url
from tests.waiting import wait_until
from resources.inbox import Inbox, inbox_path

REPO = Path(__file__).resolve().parents[2]
KOLS = 40


def _env(overrides: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    return {**env, **overrides, "PYTHONPATH": str(REPO)}


def _commops(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "commops_cli", *args], env=_env(env), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL, check=False)


def _serving_demo(data_dir: Path, port: int) -> subprocess.CompletedProcess[str]:
    """`demo --serve` (its data directory from COMMOPS_DATA_DIR) until its service answers, then SIGTERM: it
    stops within 30 s and frees the port."""
    out, err = data_dir / "serve.out", data_dir / "serve.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "commops_cli", "demo", "--serve", "--port", str(port)],
                                   env=_env({"COMMOPS_DATA_DIR": str(data_dir)}), cwd=REPO,
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


def _serve(args: list[str], env: dict[str, str], log: Path, health_url: str) -> subprocess.Popen:
    """A long-running `commops` command (as a second shell would run it), once `health_url` answers."""
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "commops_cli", *args], env=_env(env), cwd=REPO,
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    wait_for_url(process, health_url, 60, log, interval=0.1)
    return process


@pytest.mark.timeout(900)  # two demos, a sync and the receiver, each building the dbt marts: minutes on a busy machine
def test_demo_syncs_the_seeded_local_service_a_second_run_reuses_it_and_then_a_new_kol_reaches_analytics(tmp_path):
    data_dir = tmp_path / "data"
    first = _commops("demo", "--kols", str(KOLS), "--data-dir", str(data_dir), env={})
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Seeding the local service" in first.stdout
    assert "analytics.duckdb" in first.stdout
    closing = first.stdout.strip().splitlines()[-1]  # its addresses are dead once it exits: says so, and what to run
    assert "answer no more" in closing and "commops demo --serve" in closing and "commops ui" in closing

    report = data_dir / "reports" / "reconciliation" / "latest.html"
    assert report.is_file()
    assert "Report:" in first.stdout and "reconciliation-" in first.stdout  # where the report is

    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM kols").fetchone()[0] == KOLS
        assert conn.execute("SELECT count(*) FROM kol_details").fetchone()[0] > 0
        statuses = dict(conn.execute("SELECT status, count(*) FROM kol_crm_reconciliation WHERE kol_primary GROUP BY 1").fetchall())
        active = conn.execute("SELECT count(*) FROM kols WHERE is_archived IS NOT TRUE").fetchone()[0]
        assert sum(statuses.values()) == active and statuses["matched"] > 0 and statuses["missing_in_crm"] > 0
    credentials = data_dir / "service" / "demo-credentials.json"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600  # the API key is readable by its owner only

    second = _serving_demo(data_dir, free_port())  # with --serve: up until SIGTERM, then everything stops
    assert "Seeding the local service" not in second.stdout  # same database, same key
    api_key = json.loads(credentials.read_text())["api_key"]
    assert api_key not in first.stdout + first.stderr + second.stdout + second.stderr  # never printed
    sandbox_env = data_dir / "crm-sandbox" / "salesforce.env"
    assert stat.S_IMODE(sandbox_env.stat().st_mode) == 0o600
    password = dict(line.split("=", 1) for line in sandbox_env.read_text().splitlines())["SALESFORCE_PASSWORD"]
    assert password not in second.stdout + second.stderr

    _after_the_demo_its_service_syncs_and_a_new_kol_reaches_analytics_through_the_receiver(data_dir, tmp_path)


def _after_the_demo_its_service_syncs_and_a_new_kol_reaches_analytics_through_the_receiver(data_dir: Path,
                                                                                          tmp_path: Path) -> None:
    """The README's local walkthroughs, step by step (free ports instead of 8000 and 8787)."""
    env = {"COMMOPS_DATA_DIR": str(data_dir)}
    key = _commops("service", "demo-key", env=env)
    assert key.returncode == 0, key.stderr
    api_key = key.stdout.strip().splitlines()[-1]

    service_port, receiver_port = free_port(), free_port()
    base_url = f"http://127.0.0.1:{service_port}/v1"
    client_env = {**env, "COMMOPS_BASE_URL": base_url, "COMMOPS_API_KEY": api_key}
    # shell 1: the demo's database, by default; loopback webhook targets allowed
    service = _serve(["service", "run", "--port", str(service_port)],
                     {**env, "COMMOPS_SERVICE_WEBHOOK_ALLOW_PRIVATE": "true"}, tmp_path / "service.log",
                     f"{base_url}/openapi.json")
    receiver = None
    try:
        result = _commops("sync", "--no-progress", env=client_env)
        assert result.returncode == 0, result.stderr
        assert "warehouse/kols" in result.stdout

        # shell 2: the receiver; shell 3: register it, create a KOL, apply the event, query analytics.duckdb
        receiver_log = tmp_path / "receiver.log"
        receiver = _serve(["receiver", "run", "--port", str(receiver_port)], env, receiver_log,
                          f"http://127.0.0.1:{receiver_port}/healthz")
        registered = _commops("webhooks", "register", f"http://127.0.0.1:{receiver_port}/webhooks/commops",
                              env=client_env)
        assert registered.returncode == 0, registered.stderr
        created = httpx.post(f"{base_url}/kols", headers={"Authorization": f"Bearer {api_key}"},
                             json={"full_name": "Dr. Ada Walkthrough", "specialties": ["cardiology"],
                                   "email": "ada.walkthrough@example.org"})
        assert created.status_code == 201, created.text
        inbox = Inbox(inbox_path(data_dir))  # what `commops events status` counts
        wait_until(lambda: inbox.counts()["pending"] == 1, 30, 0.1, what="the kol.created delivery in the inbox")
        inbox.close()
        applied = _commops("events", "apply", env=client_env)
        assert applied.returncode == 0, applied.stderr
        assert "1 event(s) applied" in applied.stdout
        with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as analytics:
            rows = analytics.execute("SELECT id, full_name FROM kols WHERE email = 'ada.walkthrough@example.org'").fetchall()
        assert rows == [(created.json()["data"]["id"], "Dr. Ada Walkthrough")]

        # The receiver's log says it took the new secret and received: its last line is not the start-up warning.
        lines = receiver_log.read_text().strip().splitlines()
        assert "no secret configured yet" in "\n".join(lines)
        assert any("webhook-secrets.json reloaded: 1 secret(s)" in line for line in lines), lines
        assert "deliveries accepted: 1 (1 stored, 0 duplicates)" in lines[-1], lines
        assert api_key not in receiver_log.read_text()
    finally:
        for process in (receiver, service):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
