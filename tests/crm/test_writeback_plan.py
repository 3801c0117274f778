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


def test_the_plan_is_listed_page_by_page_and_approved_by_filter(reconciled):
    from crm import approvals, listing
    from crm.writeback import store_plan

    conn, _ = reconciled
    plan = plan_writeback(conn, DEFAULT_RULES)
    assert store_plan(conn, DEFAULT_RULES, "kols", "default", "wb") == plan.num_rows
    titles = sum(1 for field in plan["field"].to_pylist() if field == "title")
    first = listing.plan_page(conn, "default", listing.Filter(field="title"), offset=0, limit=2)
    rest = listing.plan_page(conn, "default", listing.Filter(field="title"), offset=2, limit=1000)
    assert first.total == rest.total == titles > 2 and first.rows.num_rows == 2
    assert not set(first.rows["plan_key"].to_pylist()) & set(rest.rows["plan_key"].to_pylist())
    assert approvals.set_decision_matching(conn, "default", "dora", "approve", listing.Filter(field="title")) == titles
    approved = approvals.plan_to_apply(conn, "default", approved_only=True)
    assert set(approved["field"].to_pylist()) == {"title"} and approved.num_rows == titles
    assert listing.plan_page(conn, "default", listing.Filter(decision="none")).total == plan.num_rows - titles
    audited = conn.execute("SELECT count(*), any_value(\"user\") FROM crm_writeback_audit WHERE action = 'approve'").fetchall()
    assert audited == [(titles, "dora")]
    # the same decision again changes nothing and audits nothing more
    approvals.set_decision_matching(conn, "default", "dora", "approve", listing.Filter(field="title"))
    assert conn.execute("SELECT count(*) FROM crm_writeback_audit WHERE action = 'approve'").fetchall()[0][0] == titles
    # another organization's plan is its own
    assert listing.plan_page(conn, "emea").total == 0


def test_tables_from_before_organizations_gain_org_and_audit_ids():
    from crm.tables import ensure_tables

    conn = duckdb.connect()
    conn.execute("CREATE TABLE crm_writeback_audit (run_id VARCHAR, \"at\" TIMESTAMPTZ, mode VARCHAR, action VARCHAR, "
                 "kol_id VARCHAR, crm_id VARCHAR, field VARCHAR, old_value VARCHAR, new_value VARCHAR, error VARCHAR)")
    conn.execute("INSERT INTO crm_writeback_audit VALUES ('r', now(), 'applied', 'update', 'k1', 'c1', 'title', 'a', 'b', NULL), "
                 "('r', now(), 'applied', 'update', 'k2', 'c2', 'title', 'a', 'b', NULL)")
    ensure_tables(conn)
    rows = conn.execute("SELECT org, audit_id FROM crm_writeback_audit").fetchall()
    assert {org for org, _ in rows} == {"default"} and len({audit_id for _, audit_id in rows if audit_id}) == 2


def test_the_reconciliation_is_listed_problems_first_and_filtered(reconciled):
    from crm import listing

    conn, expected = reconciled
    everything = listing.reconciliation_page(conn, "default", limit=1000)
    statuses = everything.rows["status"].to_pylist()
    assert everything.total == len(statuses) and statuses[0] == "probable_match" and statuses[-1] in ("matched", "crm_only")
    assert statuses.index("duplicate_in_crm") < statuses.index("conflict") < statuses.index("matched")
    band = listing.reconciliation_page(conn, "default", listing.Filter(status="probable_match", score_band="0.95-1.00"))
    assert band.total and set(band.rows["score_band"].to_pylist()) == {"0.95-1.00"}
    not_ours = listing.reconciliation_page(conn, "default", listing.Filter(field="institution"))
    assert not_ours.total and all("institution" in (text or "") for text in not_ours.rows["differences_not_written"].to_pylist())
    assert listing.reconciliation_page(conn, "default", listing.Filter(text="NO SUCH NAME")).total == 0


def test_the_stored_plan_follows_each_night_s_result_row_for_row():
    from crm.writeback import store_plan

    kols, contacts, _ = planted()
    conn = duckdb.connect()
    load(conn, kols, contacts)
    reconcile(conn, "kols", "contacts", run_id="night-1")
    assert store_plan(conn, DEFAULT_RULES, "kols", "default", "night-1") == plan_writeback(conn, DEFAULT_RULES).num_rows
    title_fix, other_title, create = conn.execute("""
SELECT (SELECT min(crm_id) FROM crm_writeback_plan WHERE field = 'title' AND action = 'update'),
       (SELECT max(crm_id) FROM crm_writeback_plan WHERE field = 'title' AND action = 'update'),
       (SELECT min(kol_id) FROM crm_writeback_plan WHERE action = 'create')""").fetchone()
    assert title_fix != other_title
    # One contact takes its KOL's title (its update goes), another holds a new wrong title (the same change, from
    # another old value), a KOL to create changes its phone, and a KOL's contact leaves the CRM (a create comes).
    conn.execute("UPDATE contacts SET title = (SELECT new_value FROM crm_writeback_plan WHERE crm_id = ? AND "
                 "field = 'title') WHERE crm_id = ?", [title_fix, title_fix])
    conn.execute("UPDATE contacts SET title = 'Head of Nothing' WHERE crm_id = ?", [other_title])
    conn.execute("UPDATE kols SET phone = '+49 30 5550000' WHERE id = ?", [create])
    gone = conn.execute("SELECT crm_id, kol_id FROM kol_crm_reconciliation WHERE status = 'matched' ORDER BY crm_id "
                        "LIMIT 1").fetchone()
    conn.execute("DELETE FROM contacts WHERE crm_id = ?", [gone[0]])
    reconcile(conn, "kols", "contacts", run_id="night-2")
    planned = plan_writeback(conn, DEFAULT_RULES)
    assert store_plan(conn, DEFAULT_RULES, "kols", "default", "night-2") == planned.num_rows
    stored = conn.sql(f"SELECT {', '.join(PLAN.names)} FROM crm_writeback_plan "
                      "ORDER BY action DESC, kol_id, crm_id, field").to_arrow_table().cast(PLAN)
    assert stored.to_pylist() == planned.to_pylist()
    assert conn.execute("SELECT DISTINCT run_id FROM crm_writeback_plan").fetchall() == [("night-2",)]
    rows = {(row["action"], row["kol_id"], row["crm_id"], row["field"]): row for row in stored.to_pylist()}
    assert not any(key[2] == title_fix and key[3] == "title" for key in rows)
    assert [row["old_value"] for key, row in rows.items() if key[2] == other_title and key[3] == "title"] == ["Head of Nothing"]
    assert rows[("create", create, None, "phone")]["new_value"] == "+49 30 5550000"
    assert ("create", gone[1], None, "external_id") in rows
