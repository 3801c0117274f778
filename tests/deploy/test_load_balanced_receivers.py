"""Two receivers on two "hosts" (data dirs of their own) behind a real haproxy, sharing one Postgres inbox
(COMMOPS_INBOX_URL); the service's own webhook worker delivers through the load balancer; one receiver
is SIGKILLed in the middle of the stream. Every event the service's delivery log calls delivered is
stored once; then two `commops events apply` at once (say the daemon's run beside an operator's
command) apply each event exactly once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from webhooks.subscriptions import Subscriptions
from tests.haproxy import HaproxyUnavailable, find_haproxy, running_haproxy
from tests.pipeline.conftest import RunningService, start_service
from tests.pipeline.sync_support import query
from tests.pipeline.webhook_stack import WEBHOOK_SETTINGS, new_kol
from tests.postgres import PostgresServer
from tests.processes import terminate
from tests.receiver.conftest import launch_receiver_process, wait_for_receiver
from tests.service.webhook_support import free_port
from tests.waiting import wait_until
from resources.inbox import INBOX_URL_ENV, Inbox
from webhooks.signatures import read_secrets_file

EVENTS = 150
KILL_AFTER = 40  # events stored before the first receiver is killed
# Retries after 6 ms, 30 ms, 180 ms, 0.7 s, 8.6 s: what fails while haproxy's checks take the dead
# receiver out is delivered by a later attempt.
DELIVERY = {**WEBHOOK_SETTINGS, "webhook_time_scale": 0.0001}
APPLIED = re.compile(r"commops events apply: (\d+) event\(s\) applied in (\d+) run\(s\)")


@pytest.fixture
def haproxy() -> None:
    try:
        find_haproxy()
    except HaproxyUnavailable as missing:
        if os.environ.get("CI"):
            pytest.fail(str(missing))
        pytest.skip(str(missing))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RunningService]:
    running = start_service(tmp_path / "service", products=1, webhook_smtp_port=free_port(), **DELIVERY)
    try:
        yield running
    finally:
        running.server.stop()


def test_behind_a_load_balancer_every_delivered_event_is_stored_once_and_applied_once_when_a_receiver_dies(
    haproxy: None, postgres: PostgresServer, service: RunningService, tmp_path: Path
) -> None:
    inbox_url = postgres.create_database(f"inbox_{uuid.uuid4().hex[:12]}")
    balancer_port, ports = free_port(), [free_port(), free_port()]
    secrets_file = tmp_path / "registration" / "webhook-secrets.json"
    with Subscriptions(service.base_url, service.api_key) as subscriptions:  # the load balancer's address
        subscriptions.register(f"http://127.0.0.1:{balancer_port}/webhooks/commops", ["kol.created"], secrets_file)
    [secret] = read_secrets_file(secrets_file).values()
    environment = {INBOX_URL_ENV: inbox_url, "COMMOPS_WEBHOOK_SECRETS": secret}
    inbox = Inbox(inbox_url)

    with ExitStack() as stack:
        receivers = [_started(stack, launch_receiver_process(port, tmp_path / f"host{n}", environment))
                     for n, port in enumerate(ports, 1)]
        for receiver, port in zip(receivers, ports, strict=True):
            wait_for_receiver(receiver, port)
        balancer = stack.enter_context(running_haproxy(ports, port=balancer_port))
        producer = threading.Thread(target=_create_kols, args=(service, EVENTS))
        producer.start()
        wait_until(lambda: inbox.counts()["total"] >= KILL_AFTER, timeout=30, what=f"{KILL_AFTER} events stored")
        receivers[0].send_signal(signal.SIGKILL)  # mid-stream: deliveries in flight through it
        receivers[0].wait(timeout=10)
        stored_at_kill = inbox.counts()["total"]
        producer.join(timeout=60)
        assert not producer.is_alive()

        delivered = wait_until(lambda: _all_delivered(service, EVENTS), timeout=45, interval=0.1,
                               what=f"the service to deliver {EVENTS} events")
        # haproxy's checks (every 200 ms, DOWN after 2 failures) may lag the deliveries on a busy machine
        servers = wait_until(lambda: (stats := balancer.stats())["rx1"]["status"].startswith("DOWN") and stats,
                             timeout=15, interval=0.1, what="haproxy to mark the killed receiver DOWN")
        assert servers["rx2"]["status"].startswith("UP")
        assert int(servers["rx1"]["stot"]) > 0 and int(servers["rx2"]["stot"]) > 0  # both took deliveries
    assert stored_at_kill < EVENTS, "the receiver was killed after the stream ended: nothing was in flight"

    stored = inbox.get(delivered)
    assert sorted(e.id for e in stored) == sorted(delivered)  # every acknowledged event ...
    assert inbox.counts()["total"] == EVENTS  # ... stored once, nothing else

    data_dir = tmp_path / "pipeline"
    appliers = [_apply(service, inbox_url, data_dir, tmp_path / f"dagster_home{n}") for n in (1, 2)]
    outputs = [applier.communicate(timeout=120)[0] for applier in appliers]
    assert [a.returncode for a in appliers] == [0, 0], outputs
    applied = [int(APPLIED.search(out).group(1)) for out in outputs]
    assert sum(applied) == EVENTS, f"applied per process {applied}: an event was applied twice or not at all"
    counts = inbox.counts()
    assert (counts["applied"], counts["pending"], counts["claimed"]) == (EVENTS, 0, 0)
    rows = query(data_dir / "analytics.duckdb", "SELECT count(*), count(DISTINCT id), count(applied_at) FROM webhook_events")
    assert rows == [(EVENTS, EVENTS, EVENTS)]
    kols = query(data_dir / "analytics.duckdb", "SELECT count(*), count(DISTINCT id) FROM kols WHERE full_name LIKE 'Lb Kol %'")
    assert kols == [(EVENTS, EVENTS)]  # every created KOL landed in the warehouse, once
    assert {e.applied_at is not None for e in inbox.get(delivered)} == {True}


def _started(stack: ExitStack, process: subprocess.Popen) -> subprocess.Popen:
    def stop() -> None:
        terminate(process)
        process.stderr.close()

    stack.callback(stop)
    return process


def _create_kols(service: RunningService, count: int) -> None:
    from service.store import db

    for n in range(count):
        conn = service.connect()
        try:
            with db.transaction(conn):
                new_kol(conn, service.org_id, f"Lb Kol {n}")
        finally:
            conn.close()


def _all_delivered(service: RunningService, count: int) -> list[str] | None:
    """The event ids of the delivery log's `delivered` deliveries, once all `count` are; a failed one fails."""
    conn = service.connect()
    try:
        rows = conn.execute("SELECT event_id, status FROM webhook_deliveries WHERE event_id IS NOT NULL").fetchall()
    finally:
        conn.close()
    failed = [event_id for event_id, status in rows if status == "failed"]
    assert not failed, f"the service gave up on {len(failed)} deliveries, e.g. {failed[0]}"
    delivered = [event_id for event_id, status in rows if status == "delivered"]
    return delivered if len(delivered) == count else None


def _apply(service: RunningService, inbox_url: str, data_dir: Path, dagster_home: Path) -> subprocess.Popen:
    dagster_home.mkdir(parents=True)
    env = {**os.environ, INBOX_URL_ENV: inbox_url, "COMMOPS_BASE_URL": service.base_url,
           "COMMOPS_API_KEY": service.api_key, "DAGSTER_HOME": str(dagster_home)}
    commops = Path(sys.executable).parent / "commops"
    return subprocess.Popen([commops, "events", "apply", "--data-dir", str(data_dir)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
