"""Where the alert tests' channels deliver: a local HTTP listener (the Slack and JSON webhooks) and an
aiosmtpd server, each on a free loopback port, keeping what they received."""

from __future__ import annotations

import email
import email.policy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from http_serving.sockets import free_port


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HttpListener:
    """Answers `status` to every POST (500 to refuse; change it to let deliveries through), keeping the
    requests it answered 2xx in `received` and counting the others in `refused`."""

    status: int = 200
    received: list[Received] = field(default_factory=list)
    refused: int = 0
    port: int = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def on(self, path: str) -> list[Received]:
        return [request for request in self.received if request.path == path]


@contextmanager
def http_listener() -> Iterator[HttpListener]:
    listener = HttpListener()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = listener.status
            if 200 <= status < 300:
                listener.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            else:
                listener.refused += 1
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    listener.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Mailbox:
    """aiosmtpd's handler: every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 (aiosmtpd's naming)
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 Message accepted for delivery"


@contextmanager
def smtp_server() -> Iterator[tuple[Mailbox, int]]:
    mailbox, port = Mailbox(), free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield mailbox, port
    finally:
        controller.stop()


@contextmanager
def alert_channels() -> Iterator[tuple[HttpListener, Mailbox, dict[str, str]]]:
    """Both listeners, and the environment that sends alerts to all three channels."""
    with http_listener() as http, smtp_server() as (mailbox, port):
        yield http, mailbox, {
            "COMMOPS_ALERT_SLACK_WEBHOOK_URL": http.url("/slack/T0/B0/slack-url-secret"),
            "COMMOPS_ALERT_WEBHOOK_URL": http.url("/hook"),
            "COMMOPS_ALERT_WEBHOOK_SECRET": "alert-signing-secret",
            "COMMOPS_ALERT_SMTP_HOST": "127.0.0.1",
            "COMMOPS_ALERT_SMTP_PORT": str(port),
            "COMMOPS_ALERT_SMTP_STARTTLS": "false",
            "COMMOPS_ALERT_SMTP_FROM": "commops@example.org",
            "COMMOPS_ALERT_SMTP_TO": "oncall@example.org",
            "COMMOPS_DAGSTER_URL": "http://dagster.example:3000",
        }
