"""Serving the receiver with uvicorn: in the foreground (`commops receiver run`) or in a
background thread (tests, benchmarks)."""

from __future__ import annotations

import errno
import socket
import sqlite3
import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette

from webhook_receiver.app import HEALTH_PATH, WEBHOOK_PATH, create_app
from webhook_receiver.committer import GroupCommitter
from webhook_receiver.inbox import Inbox
from webhook_receiver.settings import ReceiverSettings


class ReceiverStartError(RuntimeError):
    """The receiver cannot start; the message is one line saying why and what to do."""


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free port), or ReceiverStartError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ReceiverStartError(f"port {port} on {host} is already in use: choose another with --port") from None
        raise ReceiverStartError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    return sock


def open_app(settings: ReceiverSettings) -> Starlette:
    """The app over the inbox of `settings`, or ReceiverStartError when the data dir is not writable."""
    try:
        inbox = Inbox(settings.inbox_path)
    except (OSError, sqlite3.Error) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ReceiverStartError(
            f"cannot open the inbox {settings.inbox_path}: {reason} (is COMMOPS_DATA_DIR writable?)"
        ) from None
    return create_app(settings, committer=GroupCommitter(inbox))


class ReceiverServer:
    """`with ReceiverServer(settings) as rx: httpx.post(rx.url, ...)`: uvicorn in a thread on
    127.0.0.1 and a free port; start() returns once /healthz answers, stop() waits for it."""

    def __init__(self, settings: ReceiverSettings, host: str = "127.0.0.1", port: int = 0,
                 app: Starlette | None = None) -> None:
        self.settings = settings
        self.host = host
        self._requested_port = port
        self._app = app
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return self.base_url + WEBHOOK_PATH

    def start(self, timeout: float = 20.0) -> ReceiverServer:
        self._socket = bind(self.host, self._requested_port)
        self.port = self._socket.getsockname()[1]
        app = self._app or open_app(self.settings)
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name=f"receiver-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise ReceiverStartError(f"the receiver on port {self.port} stopped while starting")
            if self._server.started:
                try:
                    if httpx.get(self.base_url + HEALTH_PATH, timeout=2).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
            time.sleep(0.02)
        self.stop()
        raise ReceiverStartError(f"the receiver did not answer on {self.base_url} within {timeout} s")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> ReceiverServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
