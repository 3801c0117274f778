"""Merges beside the fetch: a nightly run hands each table's merge to the warehouse's background writer
while the next list is fetched; the table's step takes the result, or merges itself when nobody handed it."""

from __future__ import annotations

import os
import sys
import threading

import dagster as dg
import duckdb
import pytest

from sync.catalog import CATALOG, FETCH_ORDER
from assets.lake import SNAPSHOT_ASSETS
from assets.snapshot_date import today
from assets.warehouse import TABLE_ASSETS
from commops_cli.in_process import failure_message
from pipelines.definitions import build_resources
from resources.background_writer import NICENESS, BackgroundWriter
from resources.settings import load_settings
from resources.warehouse import WarehouseResource
from tests.pipeline.conftest import start_service
from tests.pipeline.sync_support import api_key_in_env, query, sync, warehouse_state, with_orgs


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    service = start_service(tmp_path_factory.mktemp("service"), kols=300, campaigns=40, products=12, signals=300)
    yield service
    service.server.stop()


def _materialize(service, data_dir, selection):
    """One run of `selection` (asset keys) of the lake and table assets, against `service`."""
    settings = load_settings(base_url=service.base_url, data_dir=str(data_dir))
    with api_key_in_env(service.api_key):
        return dg.materialize([*SNAPSHOT_ASSETS, *TABLE_ASSETS], selection=selection, partition_key="default",
                              instance=with_orgs(dg.DagsterInstance.ephemeral()), resources=build_resources(settings),
                              raise_on_error=False)


def _metadata(result, key: str) -> dict:
    (event,) = [e for e in result.get_asset_materialization_events()
                if e.materialization.asset_key.to_user_string() == key]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def _sequential(service, data_dir):
    """The snapshots in one run, the tables in a second: every merge runs in its own table step."""
    lake = _materialize(service, data_dir, [a.key for a in SNAPSHOT_ASSETS])
    tables = _materialize(service, data_dir, [a.key for a in TABLE_ASSETS])
    return lake, tables


def test_an_overlapped_sync_leaves_the_tables_a_run_of_the_tables_alone_leaves(service, tmp_path):
    summary = sync(service, tmp_path / "overlapped")
    for spec in CATALOG:
        assert summary.asset(f"lake/{spec.name}").metadata["merge_handed_to_background"] is True
        assert summary.asset(f"warehouse/{spec.name}").metadata["merged_beside_fetch"] is True
    lake, tables = _sequential(service, tmp_path / "sequential")
    assert lake.success and tables.success
    for spec in CATALOG:
        assert _metadata(lake, f"lake/{spec.name}")["merge_handed_to_background"] is False  # no table step in the run
        merged = _metadata(tables, f"warehouse/{spec.name}")
        assert merged["merged_beside_fetch"] is False and merged["dagster/row_count"] > 0  # the subset merged itself
    assert all(e.passed for e in tables.get_asset_check_evaluations())

    overlapped = warehouse_state(tmp_path / "overlapped" / "warehouse.duckdb")
    assert overlapped == warehouse_state(tmp_path / "sequential" / "warehouse.duckdb")
    assert {table: len(rows) for table, rows in overlapped.items() if table in ("kols", "signals")} == {
        "kols": 300, "signals": 300}


def test_a_merge_no_fetch_runs_beside_takes_both_cores(service, tmp_path):
    """The run waits for the last list's merge (nothing is fetched beside it): it runs with the warehouse's
    `merge_alone_threads`; the merges beside a later list's fetch leave that fetch a core."""
    summary = sync(service, tmp_path / "nightly")
    threads = {spec.name: summary.asset(f"warehouse/{spec.name}").metadata["merge_threads"] for spec in CATALOG}
    assert threads == {name: 2 if name == FETCH_ORDER[-1] else 1 for name in FETCH_ORDER}

    signals_alone = _materialize(service, tmp_path / "signals", [dg.AssetKey(["lake", "signals"]),
                                                                  dg.AssetKey(["warehouse", "signals"])])
    assert signals_alone.success
    assert _metadata(signals_alone, "warehouse/signals")["merge_threads"] == 2


def test_a_merge_alone_that_runs_out_of_memory_on_two_threads_is_merged_again_on_one(service, tmp_path):
    """Two threads hold a row group each: where the memory is too small for that (a wide table at 1M rows), the
    merge is rolled back and made again on the warehouse's `threads`; the run succeeds, and says why it was slow."""
    settings = load_settings(base_url=service.base_url, data_dir=str(tmp_path))
    resources = build_resources(settings)
    resources["warehouse"] = WarehouseResource(data_dir=str(tmp_path), merge_alone_memory_limit="1KB")
    instance = with_orgs(dg.DagsterInstance.ephemeral())
    with api_key_in_env(service.api_key):
        result = dg.materialize([*SNAPSHOT_ASSETS, *TABLE_ASSETS], partition_key="default", instance=instance,
                                selection=[dg.AssetKey(["lake", "kols"]), dg.AssetKey(["warehouse", "kols"])],
                                resources=resources)

    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    assert _metadata(result, "lake/kols")["merge_handed_to_background"] is True
    assert _metadata(result, "warehouse/kols")["merge_threads"] == 1
    [warning] = [e.user_message for e in instance.all_logs(result.run_id) if "out of memory on 2 threads" in e.user_message]
    assert "warehouse kols: out of memory on 2 threads (1KB), merged again on 1" in warning
    assert query(tmp_path / "warehouse.duckdb", "SELECT count(*), count(DISTINCT id) FROM kols") == [(300, 300)]


def test_a_merge_failing_in_the_background_fails_its_table_step_naming_the_cause_and_keeps_the_snapshot(
        service, tmp_path):
    failures = {}
    for path in ("overlapped", "sequential"):
        data_dir = tmp_path / path
        data_dir.mkdir()
        # A signals table someone made with `title` an integer: the merge cannot insert the signals' titles.
        conn = duckdb.connect(str(data_dir / "warehouse.duckdb"))
        conn.execute("CREATE TABLE signals (org VARCHAR, id VARCHAR, title INTEGER, PRIMARY KEY (org, id))")
        conn.close()
        if path == "overlapped":
            result = _materialize(service, data_dir, [a.key for a in SNAPSHOT_ASSETS + TABLE_ASSETS])
            assert _metadata(result, "lake/signals")["merge_handed_to_background"] is True
        else:
            result = _sequential(service, data_dir)[1]
        assert not result.success
        (failed,) = [e.step_key for e in result.get_step_failure_events()]
        assert failed == "warehouse__signals"
        failures[path] = failure_message(result)
        assert (data_dir / "lake" / "org=default" / "signals" / f"snapshot_date={today()}" / "data.parquet").exists()
        assert query(data_dir / "warehouse.duckdb", "SELECT count(*) FROM signals") == [(0,)]  # nothing half-written
        assert query(data_dir / "warehouse.duckdb", "SELECT count(*) FROM kols") == [(300,)]  # the others merged

    assert "Conversion Error" in failures["overlapped"] and "INT32" in failures["overlapped"]
    assert failures["overlapped"] == failures["sequential"]  # the same message as the step's own merge gives


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_the_background_writer_runs_below_the_fetchs_cpu_priority():
    """A merge beside the fetch takes only the CPU the fetch leaves idle: its thread alone is niced."""
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    fetching = nice()
    writer = BackgroundWriter()
    try:
        writer.hand("kols", nice)
        assert writer.take("kols").result() == min(fetching + NICENESS, 19)
    finally:
        writer.close()
    assert nice() == fetching
