"""The sync under faults, concurrent changes, schema drift and a crash: same tables, nothing partial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import duckdb

from sync.catalog import CATALOG, KOLS
from assets.snapshot_date import today
from sync.progress import ProgressReporter
from tests.pipeline.test_api_client_support import add_kols, archive_kols
from tests.pipeline.sync_support import (
    api_items,
    assert_row_equals_item,
    query,
    sync,
    table_rows,
    warehouse_state,
)
from tests.waiting import wait_until

FAULTS = dict(
    fault_seed=11,
    fault_500_rate=0.08,
    fault_503_rate=0.04,
    fault_429_rate=0.05,
    fault_slow_rate=0.05,
    fault_slow_seconds=0.2,
    fault_drop_rate=0.05,
    fault_truncate_rate=0.05,
)


def _second_server(service, **overrides):
    """Another server over the same service database (e.g. with faults on)."""
    from service.server import ServiceServer
    from service.settings import ServiceSettings

    settings = ServiceSettings(db=service.db_path, rate_limits_enabled=False, **overrides)
    server = ServiceServer(settings).start()
    return server, SimpleNamespace(base_url=server.base_url, api_key=service.api_key)


def test_sync_under_fault_injection_gives_exactly_the_clean_tables(make_service, tmp_path):
    service = make_service(kols=400, campaigns=60, products=40, signals=400)
    sync(service, tmp_path / "clean")
    server, faulty = _second_server(service, **FAULTS)
    try:
        summary = sync(faulty, tmp_path / "faulty")
    finally:
        server.stop()

    assert warehouse_state(tmp_path / "faulty" / "analytics.duckdb") == warehouse_state(tmp_path / "clean" / "analytics.duckdb")
    assert summary.failed_checks == []
    assert sum((a.rate_limited or 0) + (a.retries or 0) for a in summary.assets) > 0  # the faults really happened


class _MutateDuringFirstPage(ProgressReporter):
    """Creates and archives KOLs in the service while the active KOL walk is paging."""

    def __init__(self, service, archive_ids):
        self.service, self.archive_ids, self.created, self.done = service, archive_ids, [], False

    def pages(self, task, done, total):
        if task == "kols is_archived=false" and not self.done:
            self.done = True
            self.created = add_kols(self.service, 5)
            archive_kols(self.service, self.archive_ids)


def test_sync_is_exact_when_kols_are_created_and_archived_while_paging(make_service, tmp_path):
    service = make_service(kols=1500, fault_slow_rate=1.0, fault_slow_seconds=0.01)
    before = api_items(service, KOLS)
    active = sorted(k for k, v in before.items() if not v["is_archived"])
    archive_ids = active[:3] + active[-3:]
    reporter = _MutateDuringFirstPage(service, archive_ids)

    summary = sync(service, tmp_path / "data", progress=reporter)

    assert reporter.done and len(reporter.created) == 5
    after = api_items(service, KOLS)
    rows = table_rows(tmp_path / "data" / "analytics.duckdb", "kols")
    assert set(rows) == set(after) == set(before) | set(reporter.created)  # nothing lost, nothing doubled
    for kol_id in archive_ids:
        assert rows[kol_id]["is_archived"] is True
    for kol_id, item in after.items():
        assert_row_equals_item(item, rows[kol_id], KOLS.schema, f"kols[{kol_id}]")
    assert summary.failed_checks == []


def test_unknown_fields_from_the_server_are_kept_in_extra(make_service, tmp_path):
    service = make_service(kols=30, campaigns=5, products=5, signals=10, extra_fields=True)
    summary = sync(service, tmp_path / "data", enrich_details_limit=100)
    # The run lands; the schema-drift check warns of the new field on each table, named with its count.
    assert sorted(summary.failed_checks) == sorted(f"warehouse/{spec.name}:no_new_fields" for spec in CATALOG)
    assert {f.description for f in summary.check_failures if not f.blocking} == {
        f"new fields outside the spec: x_added_field ({len(api_items(service, spec))} rows)" for spec in CATALOG}
    db = tmp_path / "data" / "analytics.duckdb"
    for spec in CATALOG:
        items = api_items(service, spec)
        rows = table_rows(db, spec.table)
        for item_id, item in items.items():
            assert "x_added_field" in item
            extra = json.loads(rows[item_id]["_extra"])
            assert extra["x_added_field"] == item["x_added_field"]
            assert_row_equals_item(item, rows[item_id], spec.schema, f"{spec.table}[{item_id}]")
    ((n,),) = query(db, "SELECT count(*) FROM kols WHERE json_extract(_extra, '$.location.x_geo') IS NULL")
    assert n == 0
    # KOL details too (top-level and nested), and `_extra` is a JSON column analysts can query as such
    ((details, drifted),) = query(db, "SELECT count(*), count(*) FILTER (WHERE _extra->>'$.x_added_field' = 'drift' "
                                      "AND json_extract(_extra, '$.contact.address.x_geo') IS NOT NULL) FROM kol_details")
    assert details == drifted == sum(1 for item in api_items(service, KOLS).values() if not item["is_archived"])
    assert query(db, "SELECT DISTINCT data_type FROM duckdb_columns() JOIN duckdb_tables() USING (table_name) "
                     "WHERE column_name = '_extra'") == [("JSON",)]


def _tables(db_path) -> set[str]:
    """The tables and views of a warehouse a killed run left (none if it left no file)."""
    if not db_path.exists():
        return set()
    conn = duckdb.connect(str(db_path))  # read-write: as the next run opens it, the write-ahead log applied
    try:
        return {name for (name,) in conn.execute("SELECT table_name FROM duckdb_tables() UNION SELECT view_name "
                                                 "FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        conn.close()


def test_a_sync_killed_mid_run_leaves_no_partial_snapshot_and_the_rerun_is_correct(make_service, tmp_path):
    service = make_service(kols=800, campaigns=10, products=10, signals=50, fault_slow_rate=1.0, fault_slow_seconds=0.5)
    data_dir = tmp_path / "data"
    env = {**os.environ, "COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": service.api_key}
    env.pop("DAGSTER_HOME", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "commops_cli", "sync", "--data-dir", str(data_dir), "--no-progress", "--no-marts"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        staging = data_dir / "lake" / ".staging"

        def walking() -> bool:
            assert process.poll() is None, f"the sync exited early: {process.stderr.read().decode()}"
            return staging.is_dir() and any(staging.glob("default.kols-*/data.parquet"))

        wait_until(walking, 180, 0.02, what="the KOL walk to start")  # a cold start of Dagster on a loaded machine is slow
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    assert not (data_dir / "lake" / "org=default" / "kols" / f"snapshot_date={today()}").exists()
    # The lists fetched before the KOLs may be merged already (their merges run beside the KOLs' fetch);
    # nothing of the KOLs is.
    assert not {"kols", "kols_history"} & _tables(data_dir / "warehouse.duckdb")
    assert any(staging.iterdir())  # the crash left its private staging behind ...

    server, fast = _second_server(service)
    try:
        summary = sync(fast, data_dir)
    finally:
        server.stop()
    assert not any(staging.iterdir())  # ... which the next run removed
    assert summary.failed_checks == []
    for spec in CATALOG:
        items = api_items(service, spec)
        rows = table_rows(data_dir / "analytics.duckdb", spec.table)
        assert set(rows) == set(items)
        folder = data_dir / "lake" / "org=default" / spec.name / f"snapshot_date={today()}"
        assert sorted(p.name for p in folder.glob("*.parquet")) == ["data.parquet"]  # what the history views read


def test_a_sync_paced_by_a_one_second_rate_window_meets_no_429(make_service, tmp_path):
    # starter plan: 60 requests per (1-second) window; the sync needs ~75 requests, so two windows.
    service = make_service(kols=4000, products=5, signals=3000, plan="starter",
                           rate_limits_enabled=True, rate_window_seconds=1)
    summary = sync(service, tmp_path / "data")
    assert summary.failed_checks == []
    assert sum(a.requests or 0 for a in summary.assets) > 60
    assert sum(a.rate_limited or 0 for a in summary.assets) == 0  # paced from the headers (when it had to)
