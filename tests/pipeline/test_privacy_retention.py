"""The `retention` job: snapshots dated across 30 days with a 7-day setting keep the last 8 dates; applied
inbox events go by the same setting; reports, reconciliation runs and the write-back audit's dry-run rows too,
never below the undo window, while the audit's record of what was applied stays; unset, nothing is removed
and the run says so."""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, time, timedelta

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crm.tables import ensure_tables
from pipelines.retention import retention_job
from privacy.retention import RETENTION_DAYS_ENV, UNDO_WINDOW_ENV
from resources.warehouse import WarehouseResource
from resources.inbox import open_inbox
from resources.inbox.envelope import parse_envelope


def _at(day) -> float:
    return datetime.combine(day, time(12), UTC).timestamp()


@pytest.fixture
def dated(tmp_path):
    """30 nightly snapshots (with side files), 30 applied and one pending inbox event, 30 reports and runs, and
    each night's write-back audit: a planned (dry-run) row and an applied one."""
    data_dir = tmp_path / "data"
    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in range(30)]
    table = pa.table({"id": ["kol_a", "kol_b"], "full_name": ["Dr A", "Dr B"]})
    for day in days:
        folder = data_dir / "lake" / "org=default" / "kols" / f"snapshot_date={day}"
        (folder / "changed").mkdir(parents=True)
        pq.write_table(table, folder / "data.parquet")
        pq.write_table(table.slice(0, 1), folder / "changed" / "data.parquet")
    with open_inbox(data_dir) as inbox:
        for n, day in enumerate(days):
            body = json.dumps({"id": f"wh_evt_r{n}", "event": "kol.updated", "created_at": "2026-01-01T00:00:00Z",
                               "organization_id": "org_x", "data": {"id": "kol_a"}}).encode()
            inbox.add(body, parse_envelope(body))
        body = json.dumps({"id": "wh_evt_pending", "event": "kol.updated", "created_at": "2026-01-01T00:00:00Z",
                           "organization_id": "org_x", "data": {"id": "kol_b"}}).encode()
        inbox.add(body, parse_envelope(body))
        inbox.mark_applied([f"wh_evt_r{n}" for n in range(30)])
    with closing(sqlite3.connect(data_dir / "inbox" / "webhooks.db")) as conn:
        for n, day in enumerate(days):
            conn.execute("UPDATE events SET received_at = ? WHERE id = ?", [f"{day}T12:00:00.000000Z", f"wh_evt_r{n}"])
        conn.execute("UPDATE events SET received_at = ? WHERE id = 'wh_evt_pending'", [f"{days[-1]}T12:00:00.000000Z"])
        conn.commit()
    reports = data_dir / "reports" / "reconciliation"
    reports.mkdir(parents=True)
    with closing(duckdb.connect(str(data_dir / "warehouse.duckdb"))) as conn:
        ensure_tables(conn)
        for n, day in enumerate(days):
            path = reports / f"reconciliation-{day}.csv"
            path.write_text("kol_id\r\nkol_a\r\n")
            os.utime(path, (_at(day), _at(day)))
            conn.execute("INSERT INTO reconciliation_runs (run_id, reconciled_at) VALUES (?, to_timestamp(?))",
                         [f"run{n}", _at(day)])
            for mode in ("dry_run", "applied"):
                conn.execute("INSERT INTO crm_writeback_audit (org, audit_id, run_id, \"at\", mode, action, kol_id, field, "
                             "old_value, new_value) VALUES ('default', ?, ?, to_timestamp(?), ?, 'update', 'kol_a', "
                             "'Email', 'old@example.org', 'a@example.org')", [f"{mode}{n}", f"run{n}", _at(day), mode])
    (reports / "latest.csv").write_text("kol_id\r\n")
    os.utime(reports / "latest.csv", (_at(days[-1]), _at(days[-1])))
    with closing(duckdb.connect(str(data_dir / "marts.duckdb"))) as conn:  # kol_history as the marts hold it
        conn.execute("CREATE TABLE kol_history (org VARCHAR, kol_id VARCHAR, tier VARCHAR, valid_from DATE, "
                     "valid_to DATE, is_current BOOLEAN)")
        for n in range(1, 30, 2):  # kol_a: a tier per two nights, each row closed by the next
            conn.execute("INSERT INTO kol_history VALUES ('default', 'kol_a', ?, ?, ?, false)",
                         [f"tier_{n % 3 + 1}", days[n + 1] if n + 1 < 30 else days[-1] - timedelta(days=1), days[n - 1]])
        conn.execute("INSERT INTO kol_history VALUES ('default', 'kol_a', 'tier_1', ?, NULL, true)", [days[0]])
        conn.execute("INSERT INTO kol_history VALUES ('default', 'kol_b', 'tier_2', ?, NULL, true)", [days[-1]])
    return data_dir, today


def _run(data_dir):
    result = retention_job.execute_in_process(resources={"warehouse": WarehouseResource(data_dir=str(data_dir))},
                                              instance=dg.DagsterInstance.ephemeral())
    assert result.success
    (event,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in event.event_specific_data.metadata.items()}


def test_a_seven_day_setting_keeps_the_last_eight_nights_and_the_undo_window(dated, monkeypatch):
    data_dir, today = dated
    monkeypatch.setenv(RETENTION_DAYS_ENV, "7")
    monkeypatch.setenv(UNDO_WINDOW_ENV, "10")
    metadata = _run(data_dir)

    kept = sorted(p.name for p in (data_dir / "lake" / "org=default" / "kols").iterdir())
    assert kept == sorted(f"snapshot_date={today - timedelta(days=n)}" for n in range(8))
    assert metadata["snapshots_removed"] == 22 and metadata["cutoff"] == str(today - timedelta(days=7))
    with closing(sqlite3.connect(data_dir / "inbox" / "webhooks.db")) as conn:
        ids = {row[0] for row in conn.execute("SELECT id FROM events")}
    assert ids == {f"wh_evt_r{n}" for n in range(8)} | {"wh_evt_pending"}  # pending: kept whatever its age
    assert metadata["inbox_events_removed"] == 22
    reports = sorted(p.name for p in (data_dir / "reports" / "reconciliation").iterdir())
    assert reports == sorted([f"reconciliation-{today - timedelta(days=n)}.csv" for n in range(11)] + ["latest.csv"])
    with closing(duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True)) as conn:
        assert conn.execute("SELECT count(*) FROM reconciliation_runs").fetchone()[0] == 11  # the undo window: 10 days
    assert metadata["reports_removed"] == 19 and metadata["reconciliation_runs_removed"] == 19
    # The audit: the plans of the nights the reports went with go; every applied write stays, and analysts' copy
    # says the same.
    for database in ("warehouse.duckdb", "analytics.duckdb"):
        with closing(duckdb.connect(str(data_dir / database), read_only=True)) as conn:
            kept = dict(conn.execute("SELECT mode, count(*) FROM crm_writeback_audit GROUP BY mode").fetchall())
        assert kept == {"dry_run": 11, "applied": 30}, database
    assert metadata["dry_run_audit_rows_removed"] == 19
    # kol_history: the rows closed before the cutoff go (closed 8 days ago or earlier: 11 of 15); the open
    # rows stay, kol_b's opened 29 days ago included; analysts' copy republished.
    for database in ("marts.duckdb", "analytics.duckdb"):
        with closing(duckdb.connect(str(data_dir / database), read_only=True)) as conn:
            kept = conn.execute("SELECT kol_id, valid_to FROM kol_history ORDER BY kol_id, valid_to").fetchall()
        assert kept == [("kol_a", today - timedelta(days=n)) for n in (6, 4, 2, 0)] + [("kol_a", None), ("kol_b", None)], database
    assert metadata["kol_history_rows_removed"] == 11

    again = _run(data_dir)  # nothing more to remove the same day
    assert again["snapshots_removed"] == 0 and again["inbox_events_removed"] == 0 and again["kol_history_rows_removed"] == 0
    assert again["dry_run_audit_rows_removed"] == 0


def test_unset_keeps_everything_and_says_so(dated, monkeypatch):
    data_dir, _ = dated
    monkeypatch.delenv(RETENTION_DAYS_ENV, raising=False)
    metadata = _run(data_dir)
    assert metadata["retention_days"] == "unset (everything kept)" and metadata["snapshots_removed"] == 0
    assert len(list((data_dir / "lake" / "org=default" / "kols").iterdir())) == 30
