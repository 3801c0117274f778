"""`SpecServer`: the spec server's state and app, served by uvicorn in a background thread on 127.0.0.1."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn

from tests.spec_server.app import create_app
from tests.spec_server.state import SpecState


class SpecServer:
    """start() binds a free loopback port and returns once uvicorn serves; stop() stops and joins the thread.

    The mutation and inspection methods delegate to the thread-safe `state`."""

    def __init__(self, *, kols: int = 0, archived_kols: int = 0, campaigns: int = 0, products: int = 0,
                 signals: int = 0, random_seed: int = 0, clock_offset: float = 0.0, naive_timestamps: float = 0.0,
                 api_key: str | None = None):
        self.state = SpecState(random_seed=random_seed, clock_offset=clock_offset, naive_timestamps=naive_timestamps)
        self.state.seed(kols=kols, archived_kols=archived_kols, campaigns=campaigns, products=products, signals=signals)
        self.api_key = api_key or "spec_" + secrets.token_hex(16)
        self.host = "127.0.0.1"
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> SpecServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self._socket = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(create_app(self.state, self.api_key), log_level="warning", access_log=False,
                                date_header=False, server_header=False, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"spec-server-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the spec server on port {self.port} stopped while starting")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the spec server did not start on {self.base_url} within {timeout} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        thread = self._thread
        if self._server is not None:
            self._server.should_exit = True
        if thread is not None:
            thread.join(timeout=timeout)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None
        if thread is not None and thread.is_alive():
            raise RuntimeError(f"the spec server thread {thread.name} did not stop within {timeout} s")

    def __enter__(self) -> SpecServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:  # the key stays out of test output
        return f"SpecServer(base_url={self.base_url!r})"

    # -- the tests' handles ----------------------------------------------------------------------

    @property
    def clock_offset(self) -> float:
        return self.state.clock_offset

    @clock_offset.setter
    def clock_offset(self, seconds: float) -> None:
        self.state.clock_offset = seconds

    @property
    def requests(self) -> list[tuple[str, dict[str, str]]]:
        """Every request so far: (path, query dict), in arrival order (a copy)."""
        with self.state.lock:
            return list(self.state.requests)

    def request_count(self, path: str) -> int:
        """Requests to `path` ("/kols" or "/v1/kols")."""
        full = path if path.startswith("/v1/") else "/v1" + path
        return sum(1 for p, _ in self.requests if p == full)

    @property
    def latency(self) -> float:
        return self.state.latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        """Every list and detail request takes this long (a slow server); requests still overlap."""
        self.state.latency = seconds

    def create_kols(self, n: int) -> list[str]:
        return self.state.create("kols", n)

    def create(self, resource: str, n: int, *, stamped_ahead: float = 0.0) -> list[str]:
        return self.state.create(resource, n, stamped_ahead=stamped_ahead)

    def active_kol_ids(self) -> list[str]:
        return self.state.active_kol_ids()

    @property
    def changes(self) -> list[tuple[Any, str, str, str]]:
        """Every creation, archival and deletion so far: (real UTC time, kind, resource, id) (a copy)."""
        with self.state.lock:
            return list(self.state.changes)

    def archive_kols(self, ids: list[str]) -> None:
        self.state.archive_kols(ids)

    def delete(self, resource: str, ids: list[str]) -> None:
        self.state.delete(resource, ids)

    def truth(self, resource: str) -> list[dict[str, Any]]:
        return self.state.truth(resource)

    def archived_kol_ids(self) -> set[str]:
        return self.state.archived_kol_ids()

    def on_page(self, path: str, page: int, action: Callable[[], Any], params: dict[str, Any] | None = None) -> None:
        self.state.on_page(path, page, action, params)

    def fail_detail(self, kol_id: str, times: int, status: int = 400) -> None:
        self.state.fail_detail(kol_id, times, status)
