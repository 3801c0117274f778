"""uvicorn on a socket bound beforehand: `serve` in the foreground, `ThreadedServer` in a daemon thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Self

import uvicorn

from http_serving.sockets import bind

ASGIApp = Any  # an ASGI 3 application


def _config(app: ASGIApp, options: dict[str, Any]) -> uvicorn.Config:
    """Proxy headers are off unless `options` turn them on (http_serving.proxies.proxy_options)."""
    defaults = {"log_level": "warning", "access_log": False, "timeout_graceful_shutdown": 5, "proxy_headers": False}
    return uvicorn.Config(app, **{**defaults, **options})


def serve(app: ASGIApp, sock: socket.socket, **options: Any) -> None:
    """Serve `app` on `sock` in this (main) thread until SIGINT or SIGTERM: uvicorn stops gracefully
    (open requests get `timeout_graceful_shutdown` seconds), then re-raises the signal, so the
    process ends as the signal says. `options` are uvicorn.Config's."""
    uvicorn.Server(_config(app, options)).run(sockets=[sock])


class ServerStartError(RuntimeError):
    """The server did not come up; the message is one line saying which and why."""


class ThreadedServer:
    """uvicorn serving `make_app()` in a daemon thread, on a socket bound by start() before uvicorn
    starts (port 0: a free port chosen by the OS), so `.port` and `.url` are known at once.

    Subclasses give the app (`make_app`, called once the port is known) and may say when the server
    answers (`ready`, polled after uvicorn has started); start() returns then, stop() waits for the
    thread. `options` are uvicorn.Config's (defaults: log level warning, no access log, 5 s to finish
    open requests at stop, no proxy headers)."""

    name = "server"
    scheme = "http"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        self.host = host
        self._requested_port = port
        self.options = options
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def make_app(self) -> ASGIApp:
        raise NotImplementedError

    def ready(self) -> bool:
        """True once the server answers as its users need (default: as soon as uvicorn has started)."""
        return True

    def start(self, timeout: float = 20.0) -> Self:
        self._socket = bind(self.host, self._requested_port)
        self.port = self._socket.getsockname()[1]
        try:
            self._server = uvicorn.Server(_config(self.make_app(), self.options))
            self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                            name=f"{self.name}-{self.port}", daemon=True)
            self._thread.start()
            self._wait_until_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise ServerStartError(f"the {self.name} on port {self.port} stopped while starting")
            if self._server.started:
                try:
                    if self.ready():
                        return
                except Exception as exc:  # noqa: BLE001 (not answering yet: keep polling until the deadline)
                    last_error = exc
            time.sleep(0.02)
        reason = f": {last_error}" if last_error else ""
        raise ServerStartError(f"the {self.name} did not answer on {self.url} within {timeout} s{reason}")

    def stop(self, timeout: float = 15.0) -> bool:
        """Stop serving and join the thread; False when it was still running after `timeout` s."""
        thread = self._thread
        if self._server is not None:
            self._server.should_exit = True
        if thread is not None:
            thread.join(timeout=timeout)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None
        return thread is None or not thread.is_alive()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
