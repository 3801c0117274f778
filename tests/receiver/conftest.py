"""Fixtures for the receiver tests: a real uvicorn receiver on a free loopback port.

`make_receiver(secrets=..., **settings)` starts one over a fresh data dir; every receiver it
starts is stopped at teardown. Helpers build envelopes and sign them as the service does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from commops_spec.constants import WEBHOOK_SIGNATURE_HEADER
from webhooks.receiver.server import ReceiverServer
from webhooks.receiver.settings import ReceiverSettings
from webhooks.signatures import sign
from tests.waiting import wait_until  # noqa: F401 (re-exported for the tests importing it from here)

SECRET = "s1-" + "a" * 61
ROOT = Path(__file__).resolve().parents[2]


def envelope(event: str = "kol.updated", event_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": event_id or f"wh_evt_{uuid.uuid4().hex}",
        "event": event,
        "created_at": "2026-05-01T12:00:00.000000Z",
        "data": {"id": "kol_123", "full_name": "Dr Ana López", "tier": "tier_1"},
        "organization_id": "org_test",
        **extra,
    }


def body_of(env: dict[str, Any]) -> bytes:
    return json.dumps(env, ensure_ascii=False).encode()


def signed_headers(secret: str, body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/json", WEBHOOK_SIGNATURE_HEADER: sign(secret, body)}


def post_signed(client: httpx.Client, url: str, env: dict[str, Any], secret: str = SECRET) -> httpx.Response:
    body = body_of(env)
    return client.post(url, content=body, headers=signed_headers(secret, body))


def start_receiver_process(port: int, data_dir: Path, env: dict[str, str] | None = None,
                           preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen:
    """`commops receiver run` in a process of its own on 127.0.0.1:`port` (COMMOPS_WEBHOOK_SECRETS=SECRET
    unless `env` says otherwise), returned once /healthz answers; the caller stops it."""
    process = launch_receiver_process(port, data_dir, env, preexec_fn)
    wait_for_receiver(process, port)
    return process


def launch_receiver_process(port: int, data_dir: Path, env: dict[str, str] | None = None,
                            preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen:
    """start_receiver_process without the wait: several receivers start at once, then `wait_for_receiver`."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "COMMOPS_WEBHOOK_SECRETS": SECRET, **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "commops_cli", "receiver", "run", "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(data_dir)],
        env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=preexec_fn,
    )


def wait_for_receiver(process: subprocess.Popen, port: int) -> None:
    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the receiver exited: {process.stderr.read().decode()}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout=30, interval=0.05, what=f"the receiver on port {port}")


@pytest.fixture
def make_receiver(tmp_path: Path) -> Iterator[Callable[..., ReceiverServer]]:
    started: list[ReceiverServer] = []

    def make(secrets: str = SECRET, data_dir: Path | None = None, **settings: Any) -> ReceiverServer:
        values = {"webhook_secrets": secrets, "data_dir": data_dir or tmp_path / "data", **settings}
        server = ReceiverServer(ReceiverSettings(**values)).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c
