"""The write-back plan from a reconciled result, and the calls apply_plan makes (a fake CRM)."""

from __future__ import annotations

from typing import Any

import duckdb
import pytest

from crm.reconcile import DEFAULT_RULES, reconcile
from crm.writeback import PLAN, apply_plan, dry_run, plan_writeback, record_audit
from resources.crm.salesforce import WriteResult
from tests.crm.support import load, planted


class FakeCrm:
    """Records calls; the update of `refuse` fails, everything else succeeds."""

    def __init__(self, refuse: str | None = None) -> None:
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []
        self.refuse = refuse

    def upsert_contacts(self, rows):
        self.calls.append(("upsert_contacts", rows))
        return [WriteResult(row["external_id"], f"003NEW{i:012d}", True, True) for i, row in enumerate(rows)]

    def update_contacts(self, rows):
        self.calls.append(("update_contacts", rows))
        return [WriteResult(row["crm_id"], row["crm_id"], False, row["crm_id"] != self.refuse,
                            None if row["crm_id"] != self.refuse else "ENTITY_IS_LOCKED: locked") for row in rows]


@pytest.fixture(scope="module")
def reconciled():
    kols, contacts, expected = planted()
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", run_id="wb")
    return conn, expected


def test_plan_creates_missing_and_updates_kol_policy_fields_only(reconciled):
    conn, expected = reconciled
    plan = plan_writeback(conn, DEFAULT_RULES)
    assert plan.schema == PLAN
    rows = plan.to_pylist()
    creates = {row["kol_id"] for row in rows if row["action"] == "create"}
    assert creates == {kol for kol, status in expected.items() if status == "missing_in_crm"}
    create = {row["field"]: row["new_value"] for row in rows if row["action"] == "create" and row["kol_id"] == min(creates)}
    assert {"external_id", "email", "first_name", "last_name", "title", "phone", "institution", "country"} <= set(create)
    assert create["external_id"] == min(creates)
    updates = [row for row in rows if row["action"] == "update"]
    assert {row["kol_id"] for row in updates} == {kol for kol, status in expected.items()
                                                   if status == "conflict" and kol.startswith("kol_")}
    assert {row["field"] for row in updates} <= {"title", "phone", "institution", "external_id"}
    assert all(row["old_value"] != row["new_value"] for row in updates)


def test_name_policy_report_is_never_written(reconciled):
    conn, _ = reconciled
    conn.execute("UPDATE kol_crm_reconciliation SET differences = "
                 "'[{\"field\":\"full_name\",\"kol_value\":\"A B\",\"crm_value\":\"A C\"}]' "
                 "WHERE crm_id = (SELECT min(crm_id) FROM kol_crm_reconciliation WHERE status = 'conflict')")
    updated = {row["field"] for row in plan_writeback(conn, DEFAULT_RULES).to_pylist() if row["action"] == "update"}
    assert updated and not updated & {"full_name", "first_name", "last_name"}


def test_apply_plan_groups_per_record_and_audits_each_field(reconciled):
    conn, _ = reconciled
    plan = plan_writeback(conn, DEFAULT_RULES)
    updates = [row for row in plan.to_pylist() if row["action"] == "update"]
    crm = FakeCrm(refuse=updates[0]["crm_id"])
    audit = apply_plan(plan, crm, run_id="wb")
    assert [name for name, _ in crm.calls] == ["upsert_contacts", "update_contacts"]
    upserts, update_rows = crm.calls[0][1], crm.calls[1][1]
    assert all(row["external_id"] and row["last_name"] for row in upserts)
    assert len(update_rows) == len({row["crm_id"] for row in updates}) and all("crm_id" in row for row in update_rows)
    assert audit.num_rows == plan.num_rows
    failed = [row for row in audit.to_pylist() if row["mode"] == "failed"]
    assert failed and {row["crm_id"] for row in failed} == {updates[0]["crm_id"]} and "locked" in failed[0]["error"]
    assert record_audit(conn, audit) == audit.num_rows
    assert record_audit(conn, dry_run(plan, "wb")) == plan.num_rows
    modes = dict(conn.execute("SELECT mode, count(*) FROM crm_writeback_audit GROUP BY 1").fetchall())
    assert modes["dry_run"] == plan.num_rows and modes["applied"] + modes["failed"] == plan.num_rows


def test_a_failing_call_fails_every_record_and_never_deletes(reconciled):
    conn, _ = reconciled

    class Down(FakeCrm):
        def upsert_contacts(self, rows):
            raise ConnectionError("CRM unreachable")

    crm = Down()
    audit = apply_plan(plan_writeback(conn, DEFAULT_RULES), crm, run_id="down")
    creates = [row for row in audit.to_pylist() if row["action"] == "create"]
    assert creates and all(row["mode"] == "failed" and "unreachable" in row["error"] for row in creates)
    assert not any(hasattr(crm, name) for name in ("delete_contacts", "delete"))
