"""Run the service with uvicorn in a background thread (tests, benchmarks, `commops demo`)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import uvicorn

from service.app import create_app
from service.settings import ServiceSettings


class ServiceServer:
    """`with ServiceServer(settings) as server: httpx.get(server.base_url + "/kols", ...)`.

    Binds the socket itself (port 0: a free port chosen by the OS) before uvicorn
    starts, so .port is known at once; start() returns once the server answers."""

    def __init__(self, settings: ServiceSettings, host: str = "127.0.0.1", port: int = 0,
                 log_level: str = "warning"):
        self.settings = settings
        self.host = host
        self._requested_port = port
        self.log_level = log_level
        self.port: int | None = None
        self.app = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 20.0) -> ServiceServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        self._socket = sock
        self.port = sock.getsockname()[1]
        self.app = create_app(self.settings)
        config = uvicorn.Config(self.app, log_level=self.log_level, access_log=False, timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"service-{self.port}", daemon=True)
        self._thread.start()
        self._wait_until_answering(timeout)
        return self

    def _wait_until_answering(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._thread is not None and not self._thread.is_alive():
                raise RuntimeError(f"the service on port {self.port} stopped while starting")
            if self._server is not None and self._server.started:
                try:
                    httpx.get(f"{self.base_url}/openapi.json", timeout=2).raise_for_status()
                    return
                except httpx.HTTPError as exc:
                    last_error = exc
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"the service did not answer on {self.base_url} within {timeout} s: {last_error}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> ServiceServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
