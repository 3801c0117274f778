"""The embedded default source: a seeded local Commercial Operations Service.

`commops demo` and `commops ui` use it when no COMMOPS_BASE_URL is given. The service
database lives in $COMMOPS_DATA_DIR/service/ with the demo organization's API key beside
it in a file readable by the owner only (the key is shown once by the service, so the
demo keeps it to reuse the same database on the next run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from file_modes import private_dir, write_private_file
from service.local import create_local_service, default_counts, serve
from service.server import ServiceServer

DEMO_ORG_NAME = "Helix Medical Devices (demo)"
DEMO_OWNER_EMAIL = "commercial-ops@helix-medical.example"


@dataclass(frozen=True)
class LocalCredentials:
    org_id: str
    api_key: str


def service_dir(data_dir: Path) -> Path:
    return data_dir / "service"


def ensure_seeded(data_dir: Path, *, kols: int = 200, echo=print) -> tuple[Path, LocalCredentials]:
    """Create, seed and remember the demo organization once; later calls reuse it."""
    folder = service_dir(data_dir)
    db_path = folder / "service.db"
    credentials_path = folder / "demo-credentials.json"
    if db_path.exists() and credentials_path.exists():
        stored = json.loads(credentials_path.read_text())
        return db_path, LocalCredentials(stored["org_id"], stored["api_key"])

    private_dir(folder)
    if db_path.exists():
        db_path.unlink()  # a database without its key is unusable for the demo: start over
    echo(f"Seeding the local service ({db_path}) ...")
    local = create_local_service(db_path, org_name=DEMO_ORG_NAME, plan="enterprise", owner_email=DEMO_OWNER_EMAIL,
                                 scopes="all", **default_counts(kols=kols))
    echo("Seeded: " + ", ".join(f"{n:,} {name}" for name, n in local.seeded.items()))
    write_private_file(credentials_path, json.dumps({"org_id": local.org_id, "api_key": local.api_key}).encode())
    return db_path, LocalCredentials(local.org_id, local.api_key)


def start_local_service(db_path: Path, port: int = 0) -> ServiceServer:
    """Serve the local database on 127.0.0.1 (rate limits of the demo org's plan apply)."""
    # The demo's webhook receiver listens on loopback: opt in to private receiver addresses.
    return serve(db_path, port=port, webhook_allow_private=True)
