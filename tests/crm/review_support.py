"""A small organization for the review page's tests and screenshots: the synced KOLs' contacts in a Salesforce
stand-in, eight of them probable matches under another email (crm/salesforce_standin/discrepancies.py), five
with another title (five planned updates), reconciled once; the page served over it in a thread."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from crm.review_page.server import ReviewServer, configured_crm, page_config
from crm.review_page.settings import ReviewSettings
from crm.salesforce_standin import SalesforceStandIn
from crm.salesforce_standin.discrepancies import plant_probable_matches
from tests.crm.conftest import PASSWORD, TOKEN, USERNAME, salesforce_env
from tests.crm.support import crm_env, reconcile_against, rows

ORG = "default"
RETITLED = 5


@dataclass
class ReviewOrg:
    data_dir: Path
    env: dict[str, str]
    standin: SalesforceStandIn
    planted: dict[str, tuple[str, str]]  # kind: (kol_id, contact Id) of the probable matches
    retitled: dict[str, tuple[str, str]]  # contact Id: (title in Salesforce, the KOL's title)
    page: ReviewServer

    def reconcile(self):
        return reconcile_against(self.env, self.data_dir)

    def titles(self) -> dict[str, str]:
        return {c["Id"]: c["Title"] for c in self.standin.contacts()}

    def external_ids(self) -> dict[str, str | None]:
        return {c["Id"]: c["KOL_Id__c"] for c in self.standin.contacts()}

    def audit(self, where: str = "true") -> list[tuple]:
        return rows(self.data_dir / "analytics.duckdb",
                    'SELECT action, mode, "user", kol_id, crm_id, field, old_value, new_value, crm_value_after, undoes '
                    f'FROM crm_writeback_audit WHERE mode <> \'dry_run\' AND {where} ORDER BY "at", crm_id')


@contextmanager
def review_org(synced_data: Path, directory: Path) -> Iterator[ReviewOrg]:
    data = directory / "data"
    shutil.copytree(synced_data, data, ignore=shutil.ignore_patterns("dagster_home", "*.lock"))
    kols = [dict(zip(("id", "full_name", "title", "institution", "department", "email", "phone", "location"), row))
            for row in rows(data / "warehouse.duckdb", "SELECT id, full_name, title, institution, department, email, "
                            "phone, location FROM kols WHERE is_archived IS NOT TRUE ORDER BY id")]
    contacts, planted, namesakes = plant_probable_matches(kols)
    special = {crm for _, crm in planted.values()} | set(namesakes)
    retitle = [c for c in contacts if c["Id"] not in special and c.get("Title")][:RETITLED]
    kol_title = {c["Id"]: c["Title"] for c in retitle}
    for contact in retitle:
        contact["Title"] = f"Former {contact['Title']}"
    with ExitStack() as stack:
        standin = SalesforceStandIn(directory / "salesforce", username=USERNAME, password=PASSWORD, security_token=TOKEN)
        standin.start()
        stack.callback(standin.stop)
        ids = dict(zip([c["Id"] for c in contacts], standin.add_contacts(
            {k: v for k, v in c.items() if k not in ("Id", "LastModifiedDate")} for c in contacts)))
        env = salesforce_env(standin)
        reconcile_against(env, data)
        stack.enter_context(crm_env(env))  # the page's CRM resource reads its secrets when it acts
        crm, problem = configured_crm()
        page = ReviewServer(page_config("127.0.0.1", data, crm, problem, ReviewSettings())).start()
        stack.callback(page.stop)
        yield ReviewOrg(data, env, standin, {kind: (kol, ids[crm]) for kind, (kol, crm) in planted.items()},
                        {ids[crm]: (f"Former {title}", title) for crm, title in kol_title.items()}, page)
