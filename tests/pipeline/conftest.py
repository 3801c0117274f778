"""Fixtures for the pipeline tests: a real Commercial Operations Service on a loopback port.

`make_service(...)` builds a fresh SQLite database (one organization, one API key, seeded data)
and serves it with uvicorn on a free 127.0.0.1 port; every server it starts is stopped at teardown.
`seeded_service` is one read-only default dataset shared by the whole session.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass
class RunningService:
    """A started service: where it listens, the key to call it with, and its database."""

    base_url: str
    api_key: str
    org_id: str
    db_path: Path
    settings: Any  # service.settings.ServiceSettings
    server: Any  # service.server.ServiceServer
    seeded: dict[str, int] = field(default_factory=dict)

    def connect(self) -> sqlite3.Connection:
        """A connection to the service's database (use service.store.db.transaction to write)."""
        from service.store import db

        return db.connect(self.db_path)

    def create_key(self, scopes: list[str] | str = "all") -> str:
        """Another API key of the same organization, e.g. one lacking a scope."""
        from service import admin

        return admin.create_key(self.db_path, self.org_id, scopes)

    def __repr__(self) -> str:  # the key stays out of test output
        return f"RunningService(base_url={self.base_url!r}, org_id={self.org_id!r}, db_path={str(self.db_path)!r})"


def start_service(
    directory: Path,
    *,
    kols: int = 0,
    campaigns: int = 0,
    products: int = 0,
    signals: int = 0,
    events: int = 0,
    plan: str = "enterprise",
    scopes: list[str] | str = "all",
    random_seed: int = 0,
    **settings_overrides: Any,
) -> RunningService:
    """Create, seed and start a service in `directory`; the caller stops `server`."""
    from service.local import create_local_service

    settings_overrides.setdefault("rate_limits_enabled", False)
    if not settings_overrides["rate_limits_enabled"]:
        # Unenforced limits still count down X-RateLimit-Remaining, which a well-behaved client obeys:
        # a one-second window keeps the stated budget (the plan's per-minute figure) out of the way.
        settings_overrides.setdefault("rate_window_seconds", 1)
    local = create_local_service(
        directory / "service.db",
        org_name="Test Medical Devices",
        plan=plan,
        scopes=scopes,
        kols=kols,
        campaigns=campaigns,
        products=products,
        signals=signals,
        events=events,
        random_seed=random_seed,
        start=True,
        settings=settings_overrides,
    )
    return RunningService(
        base_url=local.server.base_url,
        api_key=local.api_key,
        org_id=local.org_id,
        db_path=local.db_path,
        settings=local.server.settings,
        server=local.server,
        seeded=dict(local.seeded),
    )


@pytest.fixture
def make_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RunningService]]:
    """make_service(kols=0, campaigns=0, products=0, signals=0, events=0, plan="enterprise", scopes="all",
    random_seed=0, **settings_overrides) -> RunningService.

    Rate limits are off unless `rate_limits_enabled=True` is given; while off, the window is 1 s unless
    `rate_window_seconds` is given, so the unenforced (still counted) headers never slow a test down.
    Servers are stopped at teardown."""
    started: list[RunningService] = []

    def _make(**kwargs: Any) -> RunningService:
        service = start_service(tmp_path_factory.mktemp("service"), **kwargs)
        started.append(service)
        return service

    yield _make
    for service in reversed(started):
        service.server.stop()


@pytest.fixture(scope="session")
def seeded_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """The seed's default dataset (every enum value and filter has matches), one per session; read-only use."""
    from service.local import default_counts

    service = start_service(tmp_path_factory.mktemp("seeded_service"), **default_counts())
    yield service
    service.server.stop()
