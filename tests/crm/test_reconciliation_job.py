"""The CRM reconciliation end to end: the local service's KOLs synced into the warehouse, a Salesforce
stand-in seeded with planted discrepancies (as `commops crm sandbox` does), then the crm_reconciliation
job run in-process, its tables published, its reports written, its write-back dry run and apply."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest

from commops_cli.crm_sandbox import Sandbox, start_sandbox
from commops_cli.crm_run import ReconcileError, run_reconciliation
from crm import report
from crm.kept_features import kept_path
from resources.crm.mapping import CONTACT_UNIQUE
from resources.crm.salesforce import CLOCK_MARGIN
from tests.crm.support import crm_env, reconcile_against, rows
from tests.processes import terminate

RATE = 0.25


@pytest.fixture
def sandbox(synced, data_dir: Path) -> Iterator[Sandbox]:
    service, _ = synced
    box = start_sandbox(data_dir, base_url=service.base_url, api_key=service.api_key, rate=RATE, seed=3)
    yield box
    box.stop()


def test_every_planted_case_gets_its_status_and_the_published_copy_holds_the_result(sandbox, data_dir):
    summary = reconcile_against(sandbox, data_dir)

    analytics = data_dir / "analytics.duckdb"
    kol_status = dict(rows(analytics, "SELECT kol_id, status FROM kol_crm_reconciliation WHERE kol_primary"))
    crm_status = dict(rows(analytics, "SELECT crm_id, status FROM kol_crm_reconciliation WHERE crm_id IS NOT NULL"))
    expected = sandbox.expected
    assert {k: kol_status.get(k) for k in expected if k.startswith("kol_")} == {
        k: v for k, v in expected.items() if k.startswith("kol_")
    }
    assert {k: crm_status.get(k) for k in expected if not k.startswith("kol_")} == {
        k: v for k, v in expected.items() if not k.startswith("kol_")
    }
    active = rows(data_dir / "warehouse.duckdb", "SELECT count(*) FROM kols WHERE is_archived IS NOT TRUE")[0][0]
    assert summary.kols == active == len(kol_status)
    assert summary.contacts == sandbox.contacts == len(crm_status)
    planted = {status for status in expected.values()}
    assert {"matched", "conflict", "missing_in_crm", "crm_only", "duplicate_in_crm", "orphan_in_crm", "id_conflict"} <= planted
    for status in planted:
        assert summary.counts[status] > 0, status
    runs = rows(analytics, "SELECT run_id, matched, conflict, report_html FROM reconciliation_runs")
    assert [(r[1], r[2]) for r in runs] == [(summary.counts["matched"], summary.counts["conflict"])]
    assert summary.report_html.is_file() and summary.report_csv.is_file()
    assert summary.report_html.parent == data_dir / "reports" / "reconciliation"
    assert runs[0][3] == str(summary.report_html)
    # duplicate sets: contacts sharing an email are one set, and so are an orphan and the contact it was copied from
    sets = rows(analytics, "SELECT duplicate_set_id, list(crm_id ORDER BY crm_id), any_value(suggested_master), "
                           "list(status ORDER BY crm_id), any_value(master_reason) FROM kol_crm_reconciliation "
                           "WHERE duplicate_set_id IS NOT NULL GROUP BY 1")
    shared_email = {c for c, s in expected.items() if s == "duplicate_in_crm" and not c.startswith("kol_")}
    assert shared_email and shared_email <= {c for _, members, *_ in sets for c in members}
    orphan_sets = [s for s in sets if "orphan_in_crm" in s[3]]
    assert orphan_sets and all(reason == "has the external id (linked to its KOL)" for *_, reason in orphan_sets)
    merge = summary.report_html.parent / "latest-merge.csv"
    merged = merge.read_text(encoding="utf-8-sig").splitlines()
    assert merged[0].startswith("MasterRecordId,DuplicateRecordId") and len(merged) - 1 == sum(len(m) - 1 for _, m, *_ in sets)
    # the plan CSV lists the plan this run stored, change by change
    planned = rows(data_dir / "warehouse.duckdb",
                   f"SELECT count(*) FROM crm_writeback_plan WHERE run_id = '{summary.run_id}'")[0][0]
    with (summary.report_html.parent / "latest-plan.csv").open(encoding="utf-8-sig", newline="") as plan:
        assert planned > 0 and len(list(csv.reader(plan))) - 1 == planned


def test_a_dry_run_changes_nothing_in_the_crm_and_apply_creates_and_updates_with_an_audit(sandbox, data_dir):
    before = {c["Id"]: c for c in sandbox.standin.contacts()}
    dry = reconcile_against(sandbox, data_dir)
    assert {c["Id"]: c for c in sandbox.standin.contacts()} == before
    missing = dry.counts["missing_in_crm"]
    assert missing > 0 and dry.writeback["creates"] == missing and not dry.writeback["applied"]
    audit = data_dir / "analytics.duckdb"
    assert {m for (m,) in rows(audit, "SELECT DISTINCT mode FROM crm_writeback_audit")} == {"dry_run"}

    applied = reconcile_against(sandbox, data_dir, apply=True)
    assert applied.writeback["applied"] and applied.writeback["failed"] == 0
    after = sandbox.standin.contacts()
    assert len(after) == len(before) + missing
    created = [c for c in after if c["Id"] not in before]
    assert {c["KOL_Id__c"] for c in created} == {k for k, v in sandbox.expected.items() if v == "missing_in_crm"}
    modes = dict(rows(audit, "SELECT mode, count(*) FROM crm_writeback_audit GROUP BY mode"))
    assert modes["applied"] > 0 and "failed" not in modes

    again = reconcile_against(sandbox, data_dir)
    assert again.counts["missing_in_crm"] == 0
    # the conflicts left are on fields the KOL record does not own (names, institutions)
    left = rows(audit, "SELECT DISTINCT unnest(from_json(differences, '[{\"field\":\"VARCHAR\"}]')).field "
                       "FROM kol_crm_reconciliation WHERE status = 'conflict'")
    assert {field for (field,) in left} <= {"full_name", "institution"}


def test_reconcile_without_a_crm_or_with_a_wrong_password_fails_in_one_line(sandbox, data_dir):
    with pytest.raises(ReconcileError, match="no CRM is configured: set SALESFORCE_USERNAME"):
        run_reconciliation(data_dir=data_dir, instance=dg.DagsterInstance.ephemeral())

    env = {**os.environ, **sandbox.env, "SALESFORCE_PASSWORD": "wrong-password", "COMMOPS_DATA_DIR": str(data_dir)}
    result = subprocess.run([sys.executable, "-m", "commops_cli", "reconcile"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "Salesforce login failed" in result.stderr and "SALESFORCE_PASSWORD" in result.stderr
    assert "wrong-password" not in result.stderr + result.stdout


def test_a_report_export_named_by_commops_crm_csv_reconciles_like_salesforce_and_refuses_write_back(
    sandbox, data_dir, tmp_path
):
    import csv

    through_salesforce = reconcile_against(sandbox, data_dir)
    columns = ["Id", "FirstName", "LastName", "Email", "Title", "Phone", "Department", "Account.Name",
               "MailingCity", "MailingState", "MailingCountry", "LastModifiedDate", "KOL_Id__c"]
    export = tmp_path / "contacts-report.csv"
    with export.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for contact in sandbox.standin.contacts():
            writer.writerow(["" if contact.get(name) is None else contact[name] for name in columns])

    env = {"COMMOPS_CRM_CSV": str(export)}
    before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        through_csv = run_reconciliation(data_dir=data_dir, instance=dg.DagsterInstance.ephemeral())
        assert through_csv.source.startswith("csv ")
        assert through_csv.counts == through_salesforce.counts
        with pytest.raises(ReconcileError, match="CSV|csv|export"):
            run_reconciliation(data_dir=data_dir, apply=True, instance=dg.DagsterInstance.ephemeral())
    finally:
        for name, value in before.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)


def test_the_readme_way_crm_sandbox_then_reconcile_from_another_shell(synced, data_dir):
    """`commops crm sandbox` keeps a stand-in up and writes salesforce.env; `commops reconcile` with it exits 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SALESFORCE_") and k != "COMMOPS_CRM_CSV"}
    env["COMMOPS_DATA_DIR"] = str(data_dir)
    sandbox = subprocess.Popen([sys.executable, "-m", "commops_cli", "crm", "sandbox", "--port", "0"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        lines = []
        for line in sandbox.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C stops it"):
                break
        output = "".join(lines)
        assert "Salesforce stand-in: https://127.0.0.1:" in output, output + sandbox.stderr.read()
        env_file = data_dir / "crm-sandbox" / "salesforce.env"
        assert str(env_file.relative_to(data_dir)) in output or str(env_file) in output
        password = dict(line.split("=", 1) for line in env_file.read_text().splitlines())["SALESFORCE_PASSWORD"]
        assert password not in output
        settings = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
        result = subprocess.run([sys.executable, "-m", "commops_cli", "reconcile"], env={**env, **settings},
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr
        assert "matched" in result.stdout and "Report:" in result.stdout
        assert (data_dir / "reports" / "reconciliation" / "latest.html").is_file()
    finally:
        terminate(sandbox, timeout=10)  # then SIGKILL: SIGTERM is ignored where the test runner's parent ignored it


def test_an_invalid_salesforce_setting_is_named_in_one_line(data_dir, monkeypatch):
    monkeypatch.setenv("SALESFORCE_USERNAME", "ops@example.org")
    monkeypatch.setenv("SALESFORCE_BULK_THRESHOLD", "lots")
    with pytest.raises(ReconcileError, match=r"^SALESFORCE_BULK_THRESHOLD='lots': .*integer"):
        run_reconciliation(data_dir=data_dir, instance=dg.DagsterInstance.ephemeral())


def test_a_second_night_extracts_what_changed_and_ends_as_a_full_extract_would(sandbox, data_dir, tmp_path):
    store = sandbox.standin.store
    for n, record in enumerate(store.contacts.values()):  # seeded over the last minutes, a second apart
        record["SystemModstamp"] -= timedelta(minutes=5, seconds=n)
    reconcile_against(sandbox, data_dir)
    ids = sorted(store.contacts)
    store.update(ids[0], {"Title": "Chief of Medicine"})
    store.update(ids[1], {"Email": store.contacts[ids[2]]["Email"]})  # now shares the email of another contact
    store.delete(ids[3])
    store.create({"FirstName": "Ada", "LastName": "Newcomer", "Email": "ada.newcomer@example.org"})
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as conn:  # a KOL changed since the last reconciliation
        conn.execute("UPDATE kols SET title = 'Head of Cardiology' WHERE id = (SELECT min(id) FROM kols)")
    full_dir = tmp_path / "full"
    shutil.copytree(data_dir, full_dir, ignore=shutil.ignore_patterns("dagster_home", "*.lock"))
    with duckdb.connect(str(full_dir / "warehouse.duckdb")) as conn:
        conn.execute("DELETE FROM crm_extract_state")  # no state: a full extract

    incremental, full = reconcile_against(sandbox, data_dir), reconcile_against(sandbox, full_dir)

    state = "SELECT rows_read, rows_deleted, full_extract_at < extracted_at FROM crm_extract_state"
    assert rows(data_dir / "warehouse.duckdb", state) == [(4, 1, True)]  # 2 changed, 1 deleted, 1 new
    assert rows(full_dir / "warehouse.duckdb", state) == [(sandbox.contacts, 0, False)]
    contacts = "SELECT * EXCLUDE (_extracted_at) FROM crm_contacts ORDER BY crm_id"
    assert rows(data_dir / "warehouse.duckdb", contacts) == rows(full_dir / "warehouse.duckdb", contacts)
    assert ids[3] not in {row[1] for row in rows(data_dir / "warehouse.duckdb", contacts)}
    # the lake's snapshot of the night holds them too; the fields with a value per contact are written without a
    # dictionary (which would only cost), the others with one
    for folder in (data_dir, full_dir):
        (snapshot,) = (folder / "lake" / "org=default" / "crm_contacts").glob("snapshot_date=*/data.parquet")
        assert rows(folder / "warehouse.duckdb", f"SELECT * FROM read_parquet('{snapshot}', hive_partitioning = false) ORDER BY crm_id") == \
            rows(folder / "warehouse.duckdb", "SELECT * EXCLUDE (org, _extracted_at) FROM crm_contacts ORDER BY crm_id")
        meta = pq.ParquetFile(snapshot).metadata
        encodings = {meta.schema.column(i).name: meta.row_group(0).column(i).encodings for i in range(meta.num_columns)}
        assert not any("DICTIONARY" in encoding for name in CONTACT_UNIQUE for encoding in encodings[name])
        assert any("DICTIONARY" in encoding for encoding in encodings["country"])
    result = "SELECT * EXCLUDE (run_id, reconciled_at) FROM kol_crm_reconciliation ORDER BY crm_id, kol_id"
    assert rows(data_dir / "analytics.duckdb", result) == rows(full_dir / "analytics.duckdb", result)
    assert incremental.counts == full.counts and incremental.contacts == full.contacts == sandbox.contacts
    # the night's CSV, copied from the first night's where rows did not change, is the CSV made whole, and the kept
    # index now names it for the next night
    reports = data_dir / "reports" / "reconciliation"
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as conn:
        report.write_csv(conn, tmp_path / "whole.csv")
    assert (reports / "latest.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    assert rows(kept_path(data_dir, "default"), "SELECT name FROM report_csv_file") == [(incremental.report_csv.name,)]


def test_a_save_later_in_the_second_an_extract_began_is_read_next_night_and_that_second_is_not_read_again(sandbox, data_dir):
    store = sandbox.standin.store
    second = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)  # after every seeded stamp
    store.clock = lambda: second + timedelta(milliseconds=200)
    ids = sorted(store.contacts)
    store.update(ids[0], {"Title": "Registrar"})  # stamped in the second the first night runs in
    reconcile_against(sandbox, data_dir)
    store.clock = lambda: second + timedelta(milliseconds=700)  # after the extract, in the same second
    store.update(ids[0], {"Title": "Consultant"})
    store.update(ids[1], {"Title": "Chief of Medicine"})
    extract = "SELECT rows_read, watermark FROM crm_extract_state"
    titles = f"SELECT crm_id, title FROM crm_contacts WHERE crm_id IN ('{ids[0]}', '{ids[1]}') ORDER BY crm_id"
    assert rows(data_dir / "warehouse.duckdb", extract) == [(sandbox.contacts, second - CLOCK_MARGIN)]

    store.clock = lambda: second + timedelta(seconds=5)
    reconcile_against(sandbox, data_dir)
    assert rows(data_dir / "warehouse.duckdb", titles) == [(ids[0], "Consultant"), (ids[1], "Chief of Medicine")]
    assert rows(data_dir / "warehouse.duckdb", extract) == [(2, second + timedelta(seconds=5) - CLOCK_MARGIN)]

    store.clock = lambda: second + timedelta(seconds=9)
    reconcile_against(sandbox, data_dir)  # nothing changed: the contacts of that second are not read again
    assert rows(data_dir / "warehouse.duckdb", extract) == [(0, second + timedelta(seconds=9) - CLOCK_MARGIN)]
