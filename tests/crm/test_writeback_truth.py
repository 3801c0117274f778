"""The write-back does what its plan and audit say, against the Salesforce stand-in: what is applied is read
back, a second reconcile plans none of it again, approvals write exactly the approved rows, undo writes the
old value back or says why not, and a decisions file saved by Excel is taken row by row."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from commops_cli.crm_run import crm_resource
from commops_cli.crm_sandbox import Sandbox, start_sandbox
from crm import actions, approvals, listing, undo as undo_rules
from resources.warehouse import WarehouseResource
from tests.crm.support import crm_env, reconcile_against, rows

RATE = 0.3


@pytest.fixture
def sandbox(synced, data_dir: Path) -> Iterator[Sandbox]:
    service, _ = synced
    box = start_sandbox(data_dir, base_url=service.base_url, api_key=service.api_key, rate=RATE, seed=5)
    yield box
    box.stop()


def held(box: Sandbox) -> dict[str, dict]:
    return {contact["Id"]: contact for contact in box.standin.contacts()}


FIELDS = {"title": "Title", "phone": "Phone", "department": "Department", "city": "MailingCity",
          "state": "MailingState", "country": "MailingCountry", "email": "Email", "external_id": "KOL_Id__c",
          "first_name": "FirstName", "last_name": "LastName"}


def test_apply_then_reconcile_again_plans_nothing_applied_and_every_audit_row_is_true(sandbox, data_dir):
    dry = reconcile_against(sandbox, data_dir)
    analytics = data_dir / "analytics.duckdb"
    planned = rows(analytics, "SELECT plan_key, action, field FROM crm_writeback_plan")
    assert dry.writeback["fields"] == len(planned) > 0
    assert not {field for _, _, field in planned} & {"institution", "full_name"}  # never written, never planned
    # a contact differing only in its Account's name is matched, the difference shown as not ours to write
    not_ours = rows(analytics, "SELECT status FROM kol_crm_reconciliation WHERE differences IS NULL "
                               "AND differences_not_written::VARCHAR LIKE '%\"institution\"%'")
    assert not_ours and {status for (status,) in not_ours} == {"matched"}

    reconcile_against(sandbox, data_dir, apply=True)
    audit = rows(analytics, "SELECT mode, action, crm_id, field, new_value, crm_value_after, plan_key FROM crm_writeback_audit "
                            "WHERE mode <> 'dry_run'")
    assert audit and {mode for mode, *_ in audit} == {"applied"}
    contacts = held(sandbox)
    for _, action, crm_id, field, new_value, after, _ in audit:  # what the audit says is what Salesforce holds
        value = contacts[crm_id][FIELDS[field]]
        assert value == after and (value == new_value or (field == "email" and value == new_value.strip().lower()))
    assert {field for _, _, _, field, *_ in audit}.isdisjoint({"institution"})

    again = reconcile_against(sandbox, data_dir)
    replanned = rows(analytics, "SELECT plan_key FROM crm_writeback_plan")
    assert not {key for (key,) in replanned} & {key for *_, key in audit}
    assert again.writeback["fields"] == len(replanned) == 0
    assert again.counts["conflict"] == 0 and again.counts["missing_in_crm"] == 0


def test_approved_rows_and_only_they_are_written_then_undone_or_refused(sandbox, data_dir):
    reconcile_against(sandbox, data_dir)
    warehouse = WarehouseResource(data_dir=str(data_dir))
    before = held(sandbox)
    with warehouse.writer() as session:
        updates = listing.plan_page(session.conn, "default", listing.Filter(status="update", field="title"), limit=1000)
        creates = listing.plan_page(session.conn, "default", listing.Filter(status="create"), limit=1000)
        assert updates.total >= 2 and creates.total
        chosen = updates.rows.slice(0, 1).to_pylist()[0]
        excluded = updates.rows.slice(1, 1).to_pylist()[0]
        create_kol = creates.rows["kol_id"][0].as_py()
        assert approvals.set_decision(session.conn, "default", "anna", "approve", plan_keys=[chosen["plan_key"]]) == 1
        assert approvals.set_decision(session.conn, "default", "anna", "exclude", plan_keys=[excluded["plan_key"]]) == 1
        taken = approvals.set_decision(session.conn, "default", "anna", "approve", kol_ids=[create_kol])
        assert taken == sum(1 for k in creates.rows["kol_id"].to_pylist() if k == create_kol)
        approved = listing.plan_page(session.conn, "default", listing.Filter(decision="approve"), limit=1000)
        assert approved.total == 1 + taken

    with crm_env(sandbox):
        outcome = actions.apply_approved(warehouse, crm_resource(), "default", "anna")
    assert outcome.num_rows == 1 + taken and set(outcome["mode"].to_pylist()) == {"applied"}
    after = held(sandbox)
    changed = {crm_id for crm_id in before if before[crm_id] != after[crm_id]}
    assert changed == {chosen["crm_id"]} and after[chosen["crm_id"]]["Title"] == chosen["new_value"]
    assert after[excluded["crm_id"]]["Title"] == excluded["old_value"]
    created = [c for c in after.values() if c["Id"] not in before]
    assert [c["KOL_Id__c"] for c in created] == [create_kol]
    audited = rows(data_dir / "analytics.duckdb", "SELECT DISTINCT \"user\" FROM crm_writeback_audit WHERE mode = 'applied'")
    assert audited == [("anna",)]

    with crm_env(sandbox):
        crm = crm_resource()
        with warehouse.writer() as session:
            ids = dict(session.conn.execute(
                "SELECT action, any_value(audit_id) FROM crm_writeback_audit WHERE mode = 'applied' GROUP BY 1").fetchall())
        with pytest.raises(actions.UndoRefused, match="a create is never undone, we never delete contacts"):
            actions.undo(warehouse, crm, "default", ids["create"], "anna")
        with pytest.raises(actions.UndoRefused, match=r"more than 30 days ago \(COMMOPS_UNDO_WINDOW_DAYS\)"):
            actions.undo(warehouse, crm, "default", ids["update"], "anna", now=datetime.now(UTC) + timedelta(days=31))

        undone = actions.undo(warehouse, crm, "default", ids["update"], "bert")
        assert undone["mode"].to_pylist() == ["applied"] and held(sandbox)[chosen["crm_id"]]["Title"] == chosen["old_value"]
        with pytest.raises(actions.UndoRefused, match="undone already"):
            actions.undo(warehouse, crm, "default", ids["update"], "bert")

        # someone changes the field in Salesforce after our change: the undo refuses rather than overwrite it
        other = excluded
        with warehouse.writer() as session:
            approvals.set_decision(session.conn, "default", "anna", "approve", plan_keys=[other["plan_key"]])
        [applied] = actions.apply_approved(warehouse, crm, "default", "anna").to_pylist()
        with crm.process_config_and_initialize_cm() as someone_in_salesforce:
            someone_in_salesforce.update_contacts([{"crm_id": other["crm_id"], "title": "Edited by hand"}])
        with pytest.raises(actions.UndoRefused, match="changed in Salesforce since .*'Edited by hand'"):
            actions.undo(warehouse, crm, "default", applied["audit_id"], "anna")

        # erased for privacy: the tombstone refuses
        with warehouse.writer() as session:
            assert undo_rules.erase_kol(session.conn, "default", other["kol_id"]) >= 1
        with pytest.raises(actions.UndoRefused, match="erased for privacy"):
            actions.undo(warehouse, crm, "default", applied["audit_id"], "anna")


def test_a_decisions_file_saved_by_excel_in_an_eu_locale_is_taken_row_by_row(sandbox, data_dir):
    reconcile_against(sandbox, data_dir)
    analytics = data_dir / "analytics.duckdb"
    pairs = rows(analytics, "SELECT kol_id, crm_id FROM kol_crm_reconciliation WHERE status = 'probable_match' "
                            "AND kol_primary ORDER BY kol_id")
    assert len(pairs) >= 2
    (confirm_kol, confirm_crm), (reject_kol, reject_crm) = pairs[:2]
    lines = ["decision;status;kol_id;crm_id;kol_name;institution",
             f"confirm;probable_match;{confirm_kol};{confirm_crm};Zoë Müller;Hôpital Saint-Étienne",
             f"Reject;probable_match;{reject_kol};{reject_crm};Ana;Clínica",
             ";matched;kol_x;003x;;",  # no decision: skipped
             f"maybe;probable_match;{reject_kol};{reject_crm};;",
             "confirm;probable_match;kol_nobody;003000000000000AAA;;"]
    data = b"\xef\xbb\xbf" + "\r\n".join(lines).encode("cp1252") + b"\r\n"  # Excel: BOM, `;`, Windows-1252 text

    warehouse = WarehouseResource(data_dir=str(data_dir))
    with crm_env(sandbox):
        report = actions.apply_decisions_file(warehouse, crm_resource(), "default", data, "clara").to_pylist()
    by_line = {row["line"]: row for row in report}
    assert sorted(by_line) == [2, 3, 5, 6]
    assert by_line[2]["taken"] and "read back" in by_line[2]["reason"]
    assert by_line[3]["taken"] and by_line[3]["decision"] == "reject"
    assert not by_line[5]["taken"] and by_line[5]["reason"] == "decision 'maybe' is not confirm or reject"
    assert not by_line[6]["taken"] and "KOL kol_nobody is not an active KOL" in by_line[6]["reason"]
    assert held(sandbox)[confirm_crm]["KOL_Id__c"] == confirm_kol
    assert (data_dir / "crm" / "rejected-pairs.csv").read_text(encoding="utf-8").count(reject_crm) == 1

    again = reconcile_against(sandbox, data_dir)  # the next reconcile honours both
    status = dict(rows(analytics, f"SELECT crm_id, status FROM kol_crm_reconciliation WHERE crm_id IN "
                                  f"('{confirm_crm}', '{reject_crm}')"))
    assert status[confirm_crm] in ("matched", "conflict") and status[reject_crm] != "probable_match"
    assert again.counts["probable_match"] <= len(pairs) - 2
    with warehouse.writer() as session:
        precision = listing.precision_by_band(session.conn, "default").to_pylist()
    assert sum(row["decided"] for row in precision) == 2 and sum(row["confirmed"] for row in precision) == 1
    assert all(row["threshold"] == pytest.approx(0.9) for row in precision)

    # a plan file: approve one change, name a row the plan does not hold
    plan = rows(analytics, "SELECT plan_key FROM crm_writeback_plan ORDER BY plan_key LIMIT 1")
    text = f"decision,plan_key,action\r\napprove,{plan[0][0]},update\r\napprove,{'0' * 32},update\r\n"
    with crm_env(sandbox):
        report = actions.apply_decisions_file(warehouse, crm_resource(), "default", text.encode(), "clara").to_pylist()
    assert [row["taken"] for row in report] == [True, False] and "not in the current plan" in report[1]["reason"]
    with crm_env(sandbox), pytest.raises(actions.DecisionRefused, match="no `decision` column"):
        actions.apply_decisions_file(warehouse, crm_resource(), "default", b"kol_id;crm_id\r\na;b\r\n", "clara")
