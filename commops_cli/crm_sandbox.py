"""The CRM sandbox: a Salesforce stand-in seeded from the local service's KOLs, with planted
discrepancies, for `commops crm sandbox` and `commops demo`.

The stand-in keeps its contacts in memory (they are planted anew at every start, from the
KOLs the service has then); its CA certificate and a `salesforce.env` file with the SALESFORCE_*
variables that reach it (0600: it holds the sandbox's password) live in
$COMMOPS_DATA_DIR/crm-sandbox/.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from file_modes import private_dir, write_private_file
from crm.salesforce_standin.discrepancies import plant_discrepancies
from resources.commops_api import ApiClient
from crm.salesforce_standin import SalesforceStandIn

SANDBOX_DIR = "crm-sandbox"
ENV_FILE = "salesforce.env"
USERNAME = "crm-admin@helix-medical.example"
SERVER_SET = ("Id", "LastModifiedDate")


@dataclass
class Sandbox:
    standin: SalesforceStandIn
    env: dict[str, str]  # SALESFORCE_* variables that reach the stand-in (secrets included)
    env_file: Path
    contacts: int
    expected: dict[str, str]  # status each planted KOL id and contact Id must get

    @property
    def planted(self) -> Counter:
        """Expected statuses: one per contact, plus the KOLs no contact stands for (missing, no email)."""
        return Counter(status for key, status in self.expected.items()
                       if not key.startswith("kol_") or status in ("missing_in_crm", "no_email"))

    def stop(self) -> None:
        self.standin.stop()


def sandbox_dir(data_dir: Path) -> Path:
    return data_dir / SANDBOX_DIR


def start_sandbox(data_dir: Path, *, base_url: str, api_key: str, port: int = 0, rate: float = 0.1,
                  seed: int = 0) -> Sandbox:
    """Start the stand-in on 127.0.0.1:`port` with contacts planted from the service's active KOLs
    (a share `rate` of them given a discrepancy, deterministically by `seed`)."""
    folder = private_dir(sandbox_dir(data_dir))
    password, token = secrets.token_urlsafe(12), secrets.token_urlsafe(12)
    standin = SalesforceStandIn(folder, username=USERNAME, password=password, security_token=token, port=port)
    contacts, expected = plant_discrepancies(_active_kols(base_url, api_key), rate=rate, seed=seed)
    standin.start()
    try:
        # Salesforce assigns Ids and modification dates itself: the stand-in's ids replace the planted ones.
        ids = standin.add_contacts({k: v for k, v in c.items() if k not in SERVER_SET} for c in contacts)
    except BaseException:
        standin.stop()
        raise
    renamed = {contact["Id"]: new for contact, new in zip(contacts, ids, strict=True)}
    expected = {renamed.get(key, key): status for key, status in expected.items()}
    env = {
        "SALESFORCE_LOGIN_URL": standin.login_url,
        "SALESFORCE_USERNAME": USERNAME,
        "SALESFORCE_PASSWORD": password,
        "SALESFORCE_SECURITY_TOKEN": token,
        "SALESFORCE_CA_BUNDLE": str(standin.ca_bundle_path),
    }
    env_file = folder / ENV_FILE
    write_private_file(env_file, "".join(f"{name}={value}\n" for name, value in env.items()).encode())
    return Sandbox(standin, env, env_file, len(contacts), expected)


def _active_kols(base_url: str, api_key: str) -> Iterator[dict[str, Any]]:
    """The service's active KOLs, as list items (one complete, verified walk)."""
    with ApiClient(base_url, api_key) as client:
        for page in client.walk("/kols").pages():
            yield from page.items
