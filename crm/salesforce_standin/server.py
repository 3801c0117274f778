"""Run the Salesforce stand-in over HTTPS on 127.0.0.1 (tests, `commops demo`).

The certificate comes from a CA generated at start with trustme; its PEM is written to
`ca_bundle_path` in the directory the caller gives (the server's key beside it, owner-only), so a
client trusts the stand-in only when told to (SALESFORCE_CA_BUNDLE), never through the system store.
http_serving binds the socket before uvicorn starts (port 0: a free port), so .url is known at once.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import httpx
import trustme

from file_modes import write_private_file
from http_serving.server import ThreadedServer
from crm.salesforce_standin.app import Org, OrgConfig, create_app
from crm.salesforce_standin.store import ContactStore, format_datetime


class SalesforceStandIn(ThreadedServer):
    """`with SalesforceStandIn(tmp_path, username=..., password=..., security_token=...) as sf: sf.login_url`."""

    name = "Salesforce stand-in"
    scheme = "https"

    def __init__(self, directory: str | Path, username: str = "integration@example.com", password: str = "stand-in-password",
                 security_token: str = "TOKEN", session_ttl_seconds: float = 7_200, request_limit: int = 1_000_000,
                 external_id_field: str | None = "KOL_Id__c", custom_fields: Iterable[str] = ("Specialty__c", "Tier__c"),
                 host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        # the app sends the Date header, from the org's clock
        super().__init__(host, port, log_level=log_level, timeout_graceful_shutdown=0.5, date_header=False)
        self.directory = Path(directory)
        self.store = ContactStore(external_id_field=external_id_field, custom_fields=custom_fields)
        self.org = Org(OrgConfig(username, password, security_token, session_ttl_seconds, request_limit), self.store)
        self.ca_bundle_path = self.directory / "salesforce-standin-ca.pem"
        self._base_url = [""]

    @property
    def login_url(self) -> str:
        """Where SOAP login is served: the same host (simple-salesforce's `scratch_url`)."""
        return self.url

    @property
    def request_count(self) -> int:
        """API requests counted against the org's budget so far (login is not an API request)."""
        return self.org.request_count

    def start(self, timeout: float = 20.0) -> SalesforceStandIn:
        self.directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(self.ca_bundle_path))
        server_pem = self.directory / "salesforce-standin-server.pem"  # holds the private key: owner-only
        write_private_file(server_pem, ca.issue_cert(self.host).private_key_and_cert_chain_pem.bytes())
        self.options.update(ssl_certfile=str(server_pem), ssl_keyfile=str(server_pem))
        return super().start(timeout)

    def make_app(self):
        """The app, once the port (so the instance URL, `url`: REST and Bulk 2.0 live there) is known."""
        self._base_url[0] = self.url
        return create_app(self.org, self._base_url)

    def ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca_bundle_path))
        return httpx.get(f"{self.url}/services/data/", verify=context, trust_env=False, timeout=2).is_success

    # --- test and demo helpers -----------------------------------------------------------------------

    def add_contacts(self, contacts: Iterable[dict]) -> list[str]:
        """Seed contacts (API field names; `Account.Name` creates or reuses the Account); returns their ids."""
        return [self.store.create(dict(contact), seeding=True) for contact in contacts]

    def contacts(self) -> list[dict]:
        """Current contacts as flat dicts (Account.Name resolved, date-times in Salesforce's REST format)."""
        out = []
        for record in self.store.iter_contacts():
            flat = {name: format_datetime(value) if isinstance(value, datetime) else value for name, value in record.items()}
            flat["Account.Name"] = self.store.value(record, "Account.Name")
            out.append(flat)
        return out

    def fail_next(self, count: int = 1, status: int = 503, retry_after: int | None = None) -> None:
        """Answer the next `count` API calls with `status` (and Retry-After), as an overloaded pod does."""
        with self.org.lock:
            self.org.faults.extend([(status, retry_after)] * count)

    def expire_sessions(self) -> None:
        """End every issued session: the next call with one gets 401 INVALID_SESSION_ID."""
        self.org.expire_sessions()
