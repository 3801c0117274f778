"""The write-back plan from a reconciled result (applying it: test_writeback_truth.py, against the stand-in)."""

from __future__ import annotations

import duckdb
import pytest

from crm.reconcile import DEFAULT_RULES, reconcile
from crm.writeback import PLAN, plan_writeback
from tests.crm.support import load, planted


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
    assert {"external_id", "email", "first_name", "last_name", "title", "phone", "country"} <= set(create)
    assert not {row["field"] for row in rows} & {"institution", "full_name"}  # never written: never planned
    assert create["external_id"] == min(creates)
    updates = [row for row in rows if row["action"] == "update"]
    assert {row["kol_id"] for row in updates} == {kol for kol, status in expected.items()
                                                   if status == "conflict" and kol.startswith("kol_")}
    assert {row["field"] for row in updates} <= {"title", "phone", "external_id"}
    assert all(row["old_value"] != row["new_value"] for row in updates)


def test_name_policy_report_is_never_written(reconciled):
    conn, _ = reconciled
    conn.execute("UPDATE kol_crm_reconciliation SET differences = "
                 "'[{\"field\":\"full_name\",\"kol_value\":\"A B\",\"crm_value\":\"A C\"}]' "
                 "WHERE crm_id = (SELECT min(crm_id) FROM kol_crm_reconciliation WHERE status = 'conflict')")
    updated = {row["field"] for row in plan_writeback(conn, DEFAULT_RULES).to_pylist() if row["action"] == "update"}
    assert updated and not updated & {"full_name", "first_name", "last_name"}
