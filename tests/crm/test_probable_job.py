"""Probable matches end to end, against the Salesforce stand-in through simple-salesforce: each kind of
"same person, other email" found and namesakes left alone, --apply creating none of them, an admin's
confirm and reject round trips (`commops reconcile confirm|reject` as a subprocess) with their audit rows."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crm.salesforce_standin import SalesforceStandIn
from crm.salesforce_standin.discrepancies import PROBABLE_KINDS, plant_probable_matches
from tests.crm.conftest import PASSWORD, TOKEN, USERNAME, salesforce_env
from tests.crm.support import reconcile_against, rows


@pytest.fixture
def org(data_dir: Path, tmp_path: Path) -> Iterator[tuple[dict[str, str], SalesforceStandIn, dict, dict]]:
    """A stand-in org whose contacts are the synced KOLs', one KOL per kind under another email, and two namesakes."""
    kols = [dict(zip(("id", "full_name", "title", "institution", "department", "email", "phone", "location"), row))
            for row in rows(data_dir / "warehouse.duckdb", "SELECT id, full_name, title, institution, department, email, "
                            "phone, location FROM kols WHERE is_archived IS NOT TRUE ORDER BY id")]
    contacts, planted, namesakes = plant_probable_matches(kols)
    standin = SalesforceStandIn(tmp_path / "org", username=USERNAME, password=PASSWORD, security_token=TOKEN)
    standin.start()
    ids = dict(zip([c["Id"] for c in contacts],
                   standin.add_contacts({k: v for k, v in c.items() if k not in ("Id", "LastModifiedDate")} for c in contacts)))
    env = salesforce_env(standin)
    yield (env, standin, {kind: (kol, ids[crm]) for kind, (kol, crm) in planted.items()},
           {ids[crm]: kol for crm, kol in namesakes.items()})
    standin.stop()


def commops(env: dict[str, str], data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SALESFORCE_") and k != "COMMOPS_CRM_CSV"}
    return subprocess.run([sys.executable, "-m", "commops_cli", *args], env={**clean, **env, "COMMOPS_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=180)


def test_each_kind_of_other_email_is_a_probable_match_namesakes_are_not_and_apply_creates_none(org, data_dir):
    env, standin, planted, namesakes = org
    summary = reconcile_against(env, data_dir)
    analytics = data_dir / "analytics.duckdb"
    found = {kol: (crm, status, score) for kol, crm, status, score in rows(
        analytics, "SELECT kol_id, crm_id, status, match_score FROM kol_crm_reconciliation WHERE kol_primary")}
    assert {kind: found[kol][:2] for kind, (kol, _) in planted.items()} == {
        kind: (crm, "probable_match") for kind, (_, crm) in planted.items()}
    assert all(found[kol][2] >= 0.96 for kol, _ in planted.values())
    contact_status = dict(rows(analytics, "SELECT crm_id, status FROM kol_crm_reconciliation WHERE crm_id IS NOT NULL"))
    assert {crm: contact_status[crm] for crm in namesakes} == {crm: "crm_only" for crm in namesakes}
    assert {found[kol][1] for kol in namesakes.values()} <= {"matched", "conflict"}  # their own contact is theirs
    assert summary.needs_review == len(PROBABLE_KINDS) and summary.counts["probable_match"] == len(PROBABLE_KINDS)

    before = len(standin.contacts())
    applied = reconcile_against(env, data_dir, apply=True)
    assert applied.writeback["applied"] and applied.writeback["needs_review"] == len(PROBABLE_KINDS)
    after = standin.contacts()
    linked = {c["KOL_Id__c"] for c in after}
    assert not linked & {kol for kol, _ in planted.values()}  # no duplicate created for a probable match
    assert len(after) == before + applied.writeback["creates"]
    created = rows(analytics, "SELECT DISTINCT kol_id FROM crm_writeback_audit WHERE action = 'create'")
    assert not {kol for (kol,) in created} & {kol for kol, _ in planted.values()}


def test_confirm_links_the_pair_in_salesforce_and_reject_is_never_proposed_again(org, data_dir):
    env, standin, planted, _ = org
    reconcile_against(env, data_dir)
    (kept, kept_contact), (refused, refused_contact) = planted["nickname"], planted["moved"]

    confirmed = commops(env, data_dir, "reconcile", "confirm", kept, kept_contact)
    assert confirmed.returncode == 0, confirmed.stderr
    assert f"contact {kept_contact} now carries {kept}" in confirmed.stdout
    assert {c["Id"]: c["KOL_Id__c"] for c in standin.contacts()}[kept_contact] == kept
    rejected = commops(env, data_dir, "reconcile", "reject", refused, refused_contact)
    assert rejected.returncode == 0, rejected.stderr
    with (data_dir / "crm" / "rejected-pairs.csv").open(encoding="utf-8") as handle:
        assert [(r["kol_id"], r["crm_id"]) for r in csv.DictReader(handle)] == [(refused, refused_contact)]
    audit = rows(data_dir / "analytics.duckdb", "SELECT action, mode, kol_id, crm_id, field, new_value FROM crm_writeback_audit "
                                                "WHERE action IN ('confirm', 'reject') ORDER BY \"at\"")
    assert audit == [("confirm", "applied", kept, kept_contact, "external_id", kept),
                     ("reject", "recorded", refused, refused_contact, None, None)]

    again = reconcile_against(env, data_dir)
    status = {(kol, crm): s for kol, crm, s in rows(data_dir / "analytics.duckdb",
                                                    "SELECT kol_id, crm_id, status FROM kol_crm_reconciliation")}
    assert status[(kept, kept_contact)] in ("matched", "conflict")  # linked by the external id now
    assert (refused, refused_contact) not in status and status[(None, refused_contact)] == "crm_only"
    assert again.counts["probable_match"] == len(PROBABLE_KINDS) - 2

    assert "Nothing to do" in commops(env, data_dir, "reconcile", "confirm", kept, kept_contact).stdout
    assert "rejected before" in commops(env, data_dir, "reconcile", "reject", refused, refused_contact).stdout
    typo = commops(env, data_dir, "reconcile", "reject", "kol_nobody", refused_contact)
    assert typo.returncode == 1 and typo.stderr.count("\n") == 1 and "KOL kol_nobody is not an active KOL" in typo.stderr
