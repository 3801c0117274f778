"""The receiver killed with SIGKILL in the middle of a stream of deliveries, then restarted:
every event it acknowledged with a 2xx is in the inbox."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from pathlib import Path

import httpx

from tests.receiver.conftest import envelope, post_signed, start_receiver_process, wait_until
from tests.service.webhook_support import free_port
from resources.inbox import Inbox

CLIENTS = 4


def test_every_acknowledged_event_survives_a_sigkill_mid_stream(tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    url = f"http://127.0.0.1:{port}/webhooks/commops"
    process = start_receiver_process(port, data_dir)
    acknowledged: list[str] = []
    unacknowledged: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()

    def stream() -> None:
        with httpx.Client(timeout=5) as client:
            while not stop.is_set():
                env = envelope()
                try:
                    response = post_signed(client, url, env)
                    ok = 200 <= response.status_code < 300
                except httpx.HTTPError:
                    ok = False
                with lock:
                    (acknowledged.append(env["id"]) if ok else unacknowledged.append(env))
                if not ok and process.poll() is not None:
                    return

    threads = [threading.Thread(target=stream) for _ in range(CLIENTS)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(acknowledged) >= 400, timeout=60)
        os.kill(process.pid, signal.SIGKILL)  # mid-stream: requests are in flight on every client
        process.wait(timeout=10)
        for thread in threads:
            thread.join(timeout=30)
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    assert unacknowledged, "the kill should have interrupted some deliveries"

    path = data_dir / "inbox" / "webhooks.db"
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {event.id for event in Inbox(path).get(acknowledged)}
    assert stored == set(acknowledged), f"{len(set(acknowledged) - stored)} acknowledged events were lost"

    # Restarted, the receiver takes the retries of the interrupted deliveries, each once.
    restarted = start_receiver_process(port, data_dir)
    try:
        with httpx.Client(timeout=5) as client:
            for env in unacknowledged:
                assert post_signed(client, url, env).status_code == 200
            for event_id in acknowledged[:20]:  # a retry of an event already stored
                assert post_signed(client, url, envelope(event_id=event_id)).json()["duplicate"] is True
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=20)
        restarted.stderr.close()
    assert restarted.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after a clean stop
    assert Inbox(path).counts()["total"] == len(acknowledged) + len(unacknowledged)
