"""A ready service database, and optionally the service running on it: one organization, one
API key, seeded data. For `commops demo`, the pipeline tests and the benchmarks.

    local = create_local_service(tmp / "service.db", org_name="Test Medical Devices", kols=500, start=True,
                                 settings={"rate_limits_enabled": False})
    httpx.get(local.server.base_url + "/kols", headers={"Authorization": f"Bearer {local.api_key}"})
    local.server.stop()
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service import admin
from service.seed import Progress, seed
from service.server import ServiceServer
from service.settings import ServiceSettings
from service.store.db import init_db

SEEDED_RESOURCES = ("kols", "campaigns", "products", "signals", "events")


@dataclass
class LocalService:
    """The database, the organization and its key (shown once: keep it), the rows seeded per
    table, and the running server when one was started (the caller stops it)."""

    db_path: Path
    org_id: str
    api_key: str
    seeded: dict[str, int] = field(default_factory=dict)
    server: ServiceServer | None = None

    def __repr__(self) -> str:  # the key stays out of logs and test output
        return f"LocalService(db_path={str(self.db_path)!r}, org_id={self.org_id!r}, server={self.server!r})"


def default_counts(**overrides: int) -> dict[str, int]:
    """The seed's default dataset (every enum value and list filter has matches), per resource."""
    defaults = {
        name: param.default for name, param in inspect.signature(seed).parameters.items() if name in SEEDED_RESOURCES
    }
    return {**defaults, **overrides}


def create_local_service(
    db_path: str | Path,
    *,
    org_name: str,
    plan: str = "enterprise",
    owner_email: str | None = None,
    scopes: list[str] | str = "all",
    kols: int = 0,
    campaigns: int = 0,
    products: int = 0,
    signals: int = 0,
    events: int = 0,
    random_seed: int = 0,
    progress: Progress | None = None,
    start: bool = False,
    port: int = 0,
    settings: Mapping[str, Any] | None = None,
) -> LocalService:
    """Create the database (if needed), an organization, a key with `scopes` and the given rows;
    with start=True also serve it on 127.0.0.1:`port` (0: a free port) with `settings` overrides."""
    db_path = Path(db_path)
    init_db(db_path)
    org_id = admin.create_org(db_path, org_name, plan, owner_email)
    api_key = admin.create_key(db_path, org_id, scopes)
    counts = {"kols": kols, "campaigns": campaigns, "products": products, "signals": signals, "events": events}
    if any(counts.values()):
        seeded = seed(db_path, org_id, random_seed=random_seed, progress=progress, **counts)
    else:
        seeded = dict.fromkeys(SEEDED_RESOURCES, 0)
    local = LocalService(db_path, org_id, api_key, seeded)
    if start:
        local.server = serve(db_path, port=port, **dict(settings or {}))
    return local


def serve(db_path: str | Path, *, port: int = 0, **settings: Any) -> ServiceServer:
    """Serve an existing database on 127.0.0.1:`port` (0: a free port) until .stop()."""
    return ServiceServer(ServiceSettings(db=Path(db_path), **settings), port=port).start()
