"""The delivery worker against a real receiver, a real SMTP server and a real SQLite file."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from commops_spec.constants import WEBHOOK_RETRY_DELAYS_SECONDS
from service.store import deliveries as delivery_store
from service.store import outbox
from service.store import webhooks as store
from service.store.db import transaction
from tests.service.webhook_support import (  # noqa: F401 (fixtures)
    OWNER_EMAIL,
    ServiceDb,
    receiver,
    running_worker,
    service_db,
    smtp_server,
    wait_until,
)

SECRET = "test-secret-0123456789abcdef"


def add_webhook(db: ServiceDb, url: str, events: tuple[str, ...] = ("kol.created",)) -> str:
    conn = db.connect()
    with transaction(conn):
        webhook = store.create_webhook(conn, db.org_id, url, list(events), SECRET)
    conn.close()
    return webhook["id"]


def emit(db: ServiceDb, event: str = "kol.created", data: dict[str, Any] | None = None) -> str:
    conn = db.connect()
    with transaction(conn):
        event_id = outbox.emit(conn, db.org_id, event, data or {"id": "kol_abc", "full_name": "Dr. Åsa Lindqvist"})
    conn.close()
    return event_id


def deliveries(db: ServiceDb, webhook_id: str) -> list[dict[str, Any]]:
    conn = db.connect()
    items, _ = delivery_store.list_deliveries(conn, db.org_id, webhook_id, statuses=None, event=None, page=1, per_page=100)
    conn.close()
    return items


def webhook(db: ServiceDb, webhook_id: str) -> dict[str, Any]:
    conn = db.connect()
    found = store.get_webhook(conn, db.org_id, webhook_id)
    conn.close()
    return found


def test_body_is_the_exact_outbox_bytes_and_both_signatures_verify(service_db, receiver):
    add_webhook(service_db, receiver.url("/hook"))
    with running_worker(service_db.config()):
        event_id = emit(service_db, data={"id": "kol_abc", "full_name": "Dr. Åsa Lindqvist", "note": "ü €"})
        [got] = receiver.wait_for("/hook", 1)

    conn = service_db.connect()
    stored = conn.execute("SELECT payload FROM webhook_events WHERE id = ?", (event_id,)).fetchone()["payload"]
    conn.close()
    assert got.body == stored
    assert got.headers["content-type"] == "application/json"
    expected_hex = hmac.new(SECRET.encode(), got.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(got.headers["x-service-signature"], expected_hex)
    signed = f"{got.headers['webhook-id']}.{got.headers['webhook-timestamp']}.".encode() + got.body
    expected_std = "v1," + base64.b64encode(hmac.new(SECRET.encode(), signed, hashlib.sha256).digest()).decode()
    assert got.headers["webhook-signature"] == expected_std
    assert got.headers["webhook-id"] == event_id
    assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 30
    payload = got.json()
    assert set(payload) == {"id", "event", "created_at", "data", "organization_id"}
    assert payload["id"].startswith("wh_evt_") and payload["organization_id"] == service_db.org_id


def _threads_cpu_seconds(native_ids: list[int]) -> float:
    total = 0.0
    for native_id in native_ids:
        with open(f"/proc/self/task/{native_id}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads a thread's CPU time from /proc")
def test_an_idle_worker_costs_almost_no_processor_and_still_sends_a_new_event_at_once(service_db, receiver):
    add_webhook(service_db, receiver.url("/hook"))
    with running_worker(service_db.config()) as worker:
        time.sleep(1.0)  # nothing to send: its checks for commits have slowed to the poll interval
        # the loop's thread and the one it runs its queries on
        threads = [t.native_id for t in threading.enumerate() if t is worker._thread or t.name.startswith("webhook-db")]
        before = _threads_cpu_seconds(threads)
        time.sleep(3.0)
        used = _threads_cpu_seconds(threads) - before
        sent = time.monotonic()
        emit(service_db)
        receiver.wait_for("/hook", 1)
        took = time.monotonic() - sent
    print(f"idle worker: {used:.3f} s of processor in 3 s; an event after the quiet sent in {took:.3f} s")
    assert used < 0.06  # under 2% of a core (checking for commits every 5 ms cost about 8%)
    assert took < 1.0


def test_a_retry_is_sent_when_it_falls_due_not_at_the_next_poll(service_db, receiver):
    receiver.behave("/flaky", status=503)
    webhook_id = add_webhook(service_db, receiver.url("/flaky"))
    config = service_db.config(time_scale=0.005, jitter=0.0, poll_interval_seconds=3.0)
    first_retry = WEBHOOK_RETRY_DELAYS_SECONDS[0] * config.time_scale  # 0.3 s
    with running_worker(config):
        emit(service_db)
        first, retry = receiver.wait_for("/flaky", 2, timeout=10)
    gap = retry.received_at - first.received_at
    # never early; late by far less than the 3 s poll interval a worker polling for due retries would wait
    assert first_retry * 0.95 <= gap <= first_retry + 1.0, gap
    assert [a["attempt"] for a in deliveries(service_db, webhook_id)[0]["attempts"]][:2] == [1, 2]


def test_failed_delivery_is_retried_on_the_scaled_schedule_and_every_attempt_is_logged(service_db, receiver):
    receiver.behave("/down", status=503)
    webhook_id = add_webhook(service_db, receiver.url("/down"))
    config = service_db.config()
    with running_worker(config):
        emit(service_db)
        arrivals = receiver.wait_for("/down", 6, timeout=20)
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["status"] == "failed")

    gaps = [later.received_at - earlier.received_at for earlier, later in zip(arrivals, arrivals[1:])]
    for gap, delay in zip(gaps, WEBHOOK_RETRY_DELAYS_SECONDS):
        scaled = delay * config.time_scale
        # never earlier than the spec's delay; late by at most jitter + polling + one slow attempt
        assert scaled * 0.95 <= gap <= scaled * (1 + config.jitter) + 0.5, (gaps, delay)
    [delivery] = deliveries(service_db, webhook_id)
    assert [a["attempt"] for a in delivery["attempts"]] == [1, 2, 3, 4, 5, 6]
    assert all(a["status_code"] == 503 and a["latency_ms"] > 0 for a in delivery["attempts"])
    assert delivery["attempt_count"] == 6 and delivery["last_status_code"] == 503
    # the same event id on every attempt, so a receiver can deduplicate
    assert len({a.headers["webhook-id"] for a in arrivals}) == 1


def test_webhook_is_marked_failed_after_the_fifth_retry_and_the_owner_gets_one_email(
    service_db, receiver, smtp_server
):
    mailbox, smtp_port = smtp_server
    receiver.behave("/broken", status=500)
    webhook_id = add_webhook(service_db, receiver.url("/broken"))
    with running_worker(service_db.config(smtp_host="127.0.0.1", smtp_port=smtp_port)):
        for _ in range(3):
            emit(service_db)
        [message] = mailbox.wait_for(1)
        wait_until(lambda: webhook(service_db, webhook_id)["status"] == "failed")
        time.sleep(0.3)  # other events' failures must not send more email in the same episode
        assert len(mailbox.messages) == 1

    assert message["To"] == OWNER_EMAIL
    assert webhook_id in message["Subject"]
    assert receiver.url("/broken") in message.get_payload()
    failed = webhook(service_db, webhook_id)
    assert failed["failed_at"] and "6 attempts" in failed["failure_reason"]
    statuses = sorted(d["status"] for d in deliveries(service_db, webhook_id))
    # the first to exhaust its retries fails; the others are held for when the webhook is back
    assert statuses.count("failed") >= 1 and set(statuses) <= {"failed", "held"}


def test_a_restarted_worker_resumes_a_delivery_in_the_middle_of_its_schedule(service_db, receiver):
    receiver.behave("/flaky", status=500)
    webhook_id = add_webhook(service_db, receiver.url("/flaky"))
    config = service_db.config(time_scale=0.0002)  # retries after 12 ms, 60 ms, 360 ms, 1.44 s
    with running_worker(config):
        emit(service_db)
        receiver.wait_for("/flaky", 3)
    [before] = deliveries(service_db, webhook_id)
    assert before["status"] == "pending" and before["next_attempt_at"] is not None

    receiver.behave("/flaky", status=204)
    with running_worker(config):
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["status"] == "delivered", timeout=10)
    [after] = deliveries(service_db, webhook_id)
    assert after["attempt_count"] == before["attempt_count"] + 1
    assert [a["status_code"] for a in after["attempts"]][-1] == 204
    assert len(receiver.at("/flaky")) == after["attempt_count"]


def test_a_hanging_receiver_does_not_delay_another_webhook(service_db, receiver):
    receiver.behave("/hang", hang=True)
    add_webhook(service_db, receiver.url("/hang"))
    add_webhook(service_db, receiver.url("/fast"))
    with running_worker(service_db.config(attempt_timeout_seconds=30, per_webhook_concurrency=2)):
        started = time.monotonic()
        for _ in range(10):
            emit(service_db)
        receiver.wait_for("/fast", 10, timeout=5)
        elapsed = time.monotonic() - started
        assert len(receiver.at("/hang")) == 2  # its lane is full and stuck; the other one is not
        receiver.release()
    assert elapsed < 3


def test_a_trickling_receiver_is_cut_off_by_the_overall_attempt_deadline(service_db, receiver):
    receiver.behave("/trickle", trickle=True)
    webhook_id = add_webhook(service_db, receiver.url("/trickle"))
    with running_worker(service_db.config(attempt_timeout_seconds=0.5)):
        emit(service_db)
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["attempts"], timeout=5)
    first = deliveries(service_db, webhook_id)[0]["attempts"][0]
    assert first["error"].startswith("timeout")
    assert 450 <= first["latency_ms"] < 2500  # cut at the 0.5 s deadline, not after the 100 KB trickle


def test_a_huge_answer_is_read_only_up_to_the_cap(service_db, receiver):
    receiver.behave("/chatty", body_bytes=20_000_000)
    webhook_id = add_webhook(service_db, receiver.url("/chatty"))
    with running_worker(service_db.config(max_response_bytes=65_536)):
        emit(service_db)
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["status"] == "delivered")
    [first] = deliveries(service_db, webhook_id)[0]["attempts"]
    assert first["status_code"] == 200 and first["error"] is None
    assert first["response_excerpt"] == "y" * 1024
    assert first["latency_ms"] < 1000  # 20 MB were not read


def test_redirects_are_not_followed(service_db, receiver):
    receiver.behave("/moved", status=307, headers={"Location": receiver.url("/elsewhere")})
    webhook_id = add_webhook(service_db, receiver.url("/moved"))
    with running_worker(service_db.config()):
        emit(service_db)
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["attempt_count"] >= 2)
    assert receiver.at("/elsewhere") == []
    first = deliveries(service_db, webhook_id)[0]["attempts"][0]
    assert first["status_code"] == 307 and "not followed" in first["error"]


def test_the_connection_goes_to_the_checked_address_with_the_host_name_kept(service_db, receiver):
    webhook_id = add_webhook(service_db, f"http://localhost:{receiver.port}/named")
    with running_worker(service_db.config()):  # local default: loopback allowed
        emit(service_db)
        [got] = receiver.wait_for("/named", 1)
    assert got.headers["host"] == f"localhost:{receiver.port}"
    wait_until(lambda: deliveries(service_db, webhook_id)[0]["status"] == "delivered")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_production_mode_refuses_loopback_receivers_at_delivery_time(service_db, receiver, host):
    webhook_id = add_webhook(service_db, f"http://{host}:{receiver.port}/internal")
    with running_worker(service_db.config(allow_private=False)):
        emit(service_db)
        wait_until(lambda: deliveries(service_db, webhook_id)[0]["attempts"])
    first = deliveries(service_db, webhook_id)[0]["attempts"][0]
    assert first["error"].startswith("address_refused") and "127.0.0.1" in first["error"]
    assert first["status_code"] is None
    assert receiver.at("/internal") == []


def test_an_event_whose_change_rolls_back_is_neither_stored_nor_delivered(service_db, receiver):
    webhook_id = add_webhook(service_db, receiver.url("/hook"))
    conn = service_db.connect()
    with pytest.raises(RuntimeError):
        with transaction(conn):
            conn.execute(
                "INSERT INTO kols (id, org_id, full_name, created_at, updated_at) VALUES ('kol_rb', ?, 'X', 'a', 'a')",
                (service_db.org_id,),
            )
            outbox.emit(conn, service_db.org_id, "kol.created", {"id": "kol_rb"})
            raise RuntimeError("the change fails before commit")
    assert conn.execute("SELECT count(*) FROM webhook_events").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM webhook_deliveries").fetchone()[0] == 0
    conn.close()
    with running_worker(service_db.config()):
        emit(service_db, data={"id": "kol_committed"})
        [got] = receiver.wait_for("/hook", 1)
    assert got.json()["data"]["id"] == "kol_committed"
    assert len(deliveries(service_db, webhook_id)) == 1


def test_disabling_holds_queued_deliveries_and_enabling_sends_them(service_db, receiver):
    webhook_id = add_webhook(service_db, receiver.url("/paused"))
    conn = service_db.connect()
    emit(service_db, data={"id": "kol_before"})
    with transaction(conn):
        store.update_webhook(conn, service_db.org_id, webhook_id, enabled=False)
    emit(service_db, data={"id": "kol_while_disabled"})
    with running_worker(service_db.config()):
        time.sleep(0.2)  # give the worker every chance to (wrongly) send
        assert receiver.at("/paused") == []
        assert [d["status"] for d in deliveries(service_db, webhook_id)] == ["held"]
        with transaction(conn):
            store.update_webhook(conn, service_db.org_id, webhook_id, enabled=True)
        [got] = receiver.wait_for("/paused", 1)
    conn.close()
    assert got.json()["data"]["id"] == "kol_before"  # events while disabled are not queued


def test_after_a_failure_episode_nothing_is_lost_once_the_receiver_is_back(service_db, receiver):
    receiver.behave("/outage", status=502)
    webhook_id = add_webhook(service_db, receiver.url("/outage"))
    with running_worker(service_db.config()):
        emit(service_db, data={"id": "kol_1"})
        wait_until(lambda: webhook(service_db, webhook_id)["status"] == "failed")
        emit(service_db, data={"id": "kol_2"})  # arrives while the webhook is failed: held
        time.sleep(0.1)
        assert {d["status"] for d in deliveries(service_db, webhook_id)} == {"failed", "held"}

        receiver.behave("/outage", status=200)
        conn = service_db.connect()
        with transaction(conn):
            requeued = delivery_store.redeliver(conn, service_db.org_id, webhook_id, since="2000-01-01T00:00:00.000000Z")
        conn.close()
        assert requeued == 1
        wait_until(lambda: {d["status"] for d in deliveries(service_db, webhook_id)} == {"delivered"})
    assert webhook(service_db, webhook_id)["status"] == "active"
    ok_ids = {r.json()["data"]["id"] for r in receiver.at("/outage") if r.json()["data"]["id"]}
    assert ok_ids == {"kol_1", "kol_2"}


def test_two_workers_on_one_database_send_each_delivery_once(service_db, receiver):
    add_webhook(service_db, receiver.url("/once"))
    with running_worker(service_db.config()), running_worker(service_db.config()):
        for _ in range(30):
            emit(service_db)
        receiver.wait_for("/once", 30)
        time.sleep(0.2)
    ids = [r.headers["webhook-id"] for r in receiver.at("/once")]
    assert len(ids) == len(set(ids)) == 30


def test_only_subscribed_enabled_webhooks_of_the_organization_get_the_event(service_db, receiver):
    add_webhook(service_db, receiver.url("/kols"), ("kol.created", "kol.updated"))
    add_webhook(service_db, receiver.url("/signals"), ("signal.new",))
    with running_worker(service_db.config()):
        emit(service_db, "kol.updated", {"id": "kol_1"})
        emit(service_db, "signal.new", {"id": "sig_1"})
        receiver.wait_for("/kols", 1)
        receiver.wait_for("/signals", 1)
        time.sleep(0.1)
    assert [r.json()["event"] for r in receiver.at("/kols")] == ["kol.updated"]
    assert [r.json()["event"] for r in receiver.at("/signals")] == ["signal.new"]
    assert json.loads(receiver.at("/signals")[0].body)["data"] == {"id": "sig_1"}


def test_the_deliver_command_runs_the_worker_alone_and_stops_cleanly_on_sigterm(service_db, receiver):
    add_webhook(service_db, receiver.url("/cli"))
    emit(service_db, data={"id": "kol_queued_before_start"})
    env = {**os.environ, "COMMOPS_SERVICE_WEBHOOK_POLL_INTERVAL_SECONDS": "0.01",
           "COMMOPS_SERVICE_WEBHOOK_ALLOW_PRIVATE": "true"}  # the receiver listens on loopback
    command = [sys.executable, "-c", "from commops_cli.commops import main; main()", "service", "deliver"]
    worker = subprocess.Popen(
        [*command, "--db", str(service_db.path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        [first] = receiver.wait_for("/cli", 1, timeout=20)
        emit(service_db, data={"id": "kol_while_running"})
        receiver.wait_for("/cli", 2)
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=20)[0].decode()
    assert worker.returncode == 0, output
    assert first.json()["data"]["id"] == "kol_queued_before_start"
    assert "stopped" in output


def test_enabling_a_failed_webhook_reactivates_it_and_a_new_episode_sends_a_new_email(
    service_db, receiver, smtp_server
):
    mailbox, smtp_port = smtp_server
    receiver.behave("/episodes", status=500)
    webhook_id = add_webhook(service_db, receiver.url("/episodes"))
    conn = service_db.connect()
    with running_worker(service_db.config(smtp_host="127.0.0.1", smtp_port=smtp_port)):
        emit(service_db, data={"id": "kol_first"})
        mailbox.wait_for(1)
        emit(service_db, data={"id": "kol_held"})

        with transaction(conn):
            reactivated = store.update_webhook(conn, service_db.org_id, webhook_id, enabled=True)
        assert reactivated["status"] == "active" and reactivated["failed_at"] is None
        # the held event is attempted again at once, fails its whole schedule: a second episode
        mailbox.wait_for(2)
        assert webhook(service_db, webhook_id)["status"] == "failed"
    conn.close()
    assert len(mailbox.messages) == 2
    held_attempts = [r for r in receiver.at("/episodes") if r.json()["data"]["id"] == "kol_held"]
    assert len(held_attempts) == 6
