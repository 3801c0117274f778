"""`SpecServer`: the spec server's state and app, served by uvicorn in a background thread on 127.0.0.1
(http_serving.ThreadedServer)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from http_serving.server import ThreadedServer
from tests.spec_server.app import create_app
from tests.spec_server.state import SpecState


class SpecServer(ThreadedServer):
    """start() binds a free loopback port and returns once uvicorn serves; stop() stops and joins the thread.

    The mutation and inspection methods delegate to the thread-safe `state`."""

    name = "spec server"

    def __init__(self, *, kols: int = 0, archived_kols: int = 0, campaigns: int = 0, products: int = 0,
                 signals: int = 0, random_seed: int = 0, clock_offset: float = 0.0, naive_timestamps: float = 0.0,
                 api_key: str | None = None):
        super().__init__(date_header=False, server_header=False, timeout_graceful_shutdown=2)
        self.state = SpecState(random_seed=random_seed, clock_offset=clock_offset, naive_timestamps=naive_timestamps)
        self.state.seed(kols=kols, archived_kols=archived_kols, campaigns=campaigns, products=products, signals=signals)
        self.api_key = api_key or "spec_" + secrets.token_hex(16)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # -- lifecycle -----------------------------------------------------------------------------

    def make_app(self):
        return create_app(self.state, self.api_key)

    def stop(self, timeout: float = 15.0) -> bool:
        if not super().stop(timeout):
            raise RuntimeError(f"the spec server on port {self.port} did not stop within {timeout} s")
        return True

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

    def create(self, resource: str, n: int, *, stamped_ahead: float = 0.0, ids: tuple[str, ...] = ()) -> list[str]:
        return self.state.create(resource, n, stamped_ahead=stamped_ahead, ids=ids)

    def active_kol_ids(self) -> list[str]:
        return self.state.active_kol_ids()

    @property
    def changes(self) -> list[tuple[Any, str, str, str]]:
        """Every creation, archival and deletion so far: (real UTC time, kind, resource, id) (a copy)."""
        with self.state.lock:
            return list(self.state.changes)

    def archive_kols(self, ids: list[str]) -> None:
        self.state.archive_kols(ids)

    def update(self, resource: str, item_id: str, **fields: Any) -> None:
        self.state.update(resource, item_id, **fields)

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
