"""Webhook test support: a real HTTP receiver and a real SMTP server on loopback, and fixtures.

Test modules import the fixtures they use from here.
"""

from __future__ import annotations

import email
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from service.store import orgs
from service.store.db import connect, init_db
from service.webhooks.config import WebhookConfig
from service.webhooks.delivery import DeliveryWorker
from tests.waiting import wait_until  # noqa: F401 (re-exported for the tests importing it from here)

OWNER_EMAIL = "owner@acme-medtech.example"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Behaviour:
    status: int = 200
    hang: bool = False  # hold the request open until the receiver stops
    trickle: bool = False  # send a 200 header, then one body byte every 0.2 s, forever
    headers: dict[str, str] = field(default_factory=dict)
    body_bytes: int = 0  # answer with this many bytes instead of a small JSON body


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.behaviours: dict[str, Behaviour] = {}
        self._changed = threading.Condition()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        """End hanging and trickling requests (their connections close without an answer)."""
        self._closing.set()

    def behave(self, path: str, **kwargs: Any) -> None:
        self.behaviours[path] = Behaviour(**kwargs)

    def at(self, path: str) -> list[Received]:
        with self._changed:
            return [r for r in self.received if r.path == path]

    def wait_for(self, path: str, count: int, timeout: float = 10.0) -> list[Received]:
        """The first `count` requests to `path`, waiting up to `timeout` seconds for them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                got = [r for r in self.received if r.path == path]
                if len(got) >= count:
                    return got
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{len(got)} of {count} requests reached {path} within {timeout} s")
                self._changed.wait(remaining)

    def _record(self, received: Received) -> None:
        with self._changed:
            self.received.append(received)
            self._changed.notify_all()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver._record(Received(self.path, headers, body, time.time()))
                behaviour = receiver.behaviours.get(self.path, Behaviour())
                if behaviour.hang:
                    receiver._closing.wait(60)
                    self.close_connection = True
                    return
                if behaviour.trickle:
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    while not receiver._closing.wait(0.2):
                        try:
                            self.wfile.write(b"x")
                            self.wfile.flush()
                        except OSError:
                            break
                    self.close_connection = True
                    return
                answer = b'{"ok":true}' if 200 <= behaviour.status < 300 else b'{"error":"receiver says no"}'
                if behaviour.body_bytes:
                    answer = b"y" * behaviour.body_bytes
                self.send_response(behaviour.status)
                for name, value in behaviour.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                try:
                    self.wfile.write(answer)
                except OSError:  # the client stopped reading (a capped read): fine
                    self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


class Mailbox:
    """aiosmtpd handler keeping every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._changed = threading.Condition()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 (aiosmtpd's naming)
        with self._changed:
            self.messages.append(email.message_from_bytes(envelope.content))
            self._changed.notify_all()
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Message]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.messages) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{len(self.messages)} of {count} emails arrived within {timeout} s")
                self._changed.wait(remaining)
            return list(self.messages)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def rx() -> Iterator[Receiver]:
    """One receiver shared by the tests of a module."""
    started = Receiver().start()
    yield started
    started.stop()


@pytest.fixture
def smtp_server() -> Iterator[tuple[Mailbox, int]]:
    mailbox = Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield mailbox, port
    controller.stop()


@dataclass
class ServiceDb:
    path: Path
    org_id: str

    def connect(self) -> Any:
        return connect(self.path)

    def config(self, **overrides: Any) -> WebhookConfig:
        """Delivery settings for tests: retries shrunk 50,000-fold (1.2 ms ... 1.7 s)."""
        values: dict[str, Any] = {
            "db": self.path,
            "time_scale": 0.00002,
            "attempt_timeout_seconds": 2.0,
            "allow_private": True,  # the test receivers listen on loopback
        }
        return WebhookConfig(**{**values, **overrides})


@pytest.fixture
def service_db(tmp_path: Path) -> ServiceDb:
    path = tmp_path / "service.db"
    init_db(path)
    conn = connect(path)
    try:
        org_id = orgs.create_org(conn, "Acme Medtech", "enterprise", OWNER_EMAIL)
    finally:
        conn.close()
    return ServiceDb(path, org_id)


@contextmanager
def running_worker(config: WebhookConfig) -> Iterator[DeliveryWorker]:
    worker = DeliveryWorker(config)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


@dataclass
class WebhookService:
    """A real service (with its delivery worker) on loopback, one organization, keys."""

    server: Any
    db: Path
    org_id: str
    key: str  # every scope
    kols_only_key: str  # kols:read and webhooks:write
    other_key: str  # another organization, every scope

    def client(self, key: str | None = None) -> Any:
        import httpx

        return httpx.Client(
            base_url=self.server.base_url, headers={"Authorization": f"Bearer {key or self.key}"}, timeout=10
        )


@contextmanager
def webhook_service(db: Path, **settings: Any) -> Iterator[WebhookService]:
    from service import admin
    from service.server import ServiceServer
    from service.settings import ServiceSettings

    org_id = admin.create_org(db, "Acme Medtech", "enterprise", OWNER_EMAIL)
    other_org = admin.create_org(db, "Other Devices", "enterprise", "owner@other.example")
    values: dict[str, Any] = {
        "db": db,
        "rate_limits_enabled": False,
        "webhook_time_scale": 0.00002,
        "webhook_attempt_timeout_seconds": 2.0,
        "webhook_smtp_port": free_port(),  # nothing listens: failure emails stay owed, harmlessly
        "webhook_allow_private": True,  # the test receivers listen on loopback
    }
    server = ServiceServer(ServiceSettings(**{**values, **settings})).start()
    try:
        yield WebhookService(
            server,
            db,
            org_id,
            admin.create_key(db, org_id, "all"),
            admin.create_key(db, org_id, ["kols:read", "webhooks:write"]),
            admin.create_key(db, other_org, "all"),
        )
    finally:
        server.stop()
