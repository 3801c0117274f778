"""Warehouse writes: the newer row wins, one writer at a time, snapshot re-runs, the schedule."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sync.catalog import PRODUCTS, SIGNALS
from sync.records import RecordConverter
from resources.digest import content_fields
from resources.lake import StagedSnapshot
from resources.sql import read_parquet
from resources.warehouse import WarehouseResource, WarehouseSession
from assets.snapshot_date import today
from tests.pipeline.sync_support import query, sync, table_rows, warehouse_state, with_orgs


def _product(pid: str, fetched_at: str, name: str, markets: dict) -> dict:
    """A product as the lake stores it; products have no updated_at in the spec: _fetched_at is their version."""
    return {"id": pid, "name": name, "status": "active", "market_status": markets,
            "created_at": "2026-01-01T00:00:00Z", "_fetched_at": fetched_at}


def _merge(conn, records, spec=PRODUCTS) -> int:
    conn.register("incoming", pa.Table.from_batches([RecordConverter(spec.schema).to_batch(records)]))
    try:
        return WarehouseSession(conn).merge(spec, "incoming", org="default")
    finally:
        conn.unregister("incoming")


def test_merge_keeps_the_later_fetched_product_and_rebuilds_children_of_written_rows_only():
    conn = duckdb.connect()
    WarehouseSession(conn).ensure_table(PRODUCTS)
    _merge(conn, [_product("prod_a", "2026-05-02T00:00:00Z", "A fresh", {"US": {"status": "approved"}}),
                  _product("prod_b", "2026-05-01T00:00:00Z", "B old", {"EU": {"status": "under_review", "ce_mark": False}})])
    written = _merge(conn, [
        _product("prod_a", "2026-05-01T00:00:00Z", "A stale", {"JP": {"status": "approved"}}),  # older: ignored
        _product("prod_b", "2026-05-03T00:00:00Z", "B new", {"EU": {"status": "approved", "ce_mark": True}}),  # newer: wins
        _product("prod_c", "2026-05-01T00:00:00Z", "C", {}),  # new id
    ])
    assert written == 2
    assert dict(conn.execute("SELECT id, name FROM products").fetchall()) == {"prod_a": "A fresh", "prod_b": "B new", "prod_c": "C"}
    assert sorted(conn.execute("SELECT product_id, market, status, ce_mark FROM product_market_status").fetchall()) == [
        ("prod_a", "US", "approved", None), ("prod_b", "EU", "approved", True)]
    # A tie goes to the incoming row.
    assert _merge(conn, [_product("prod_c", "2026-05-01T00:00:00Z", "C again", {})]) == 1
    assert conn.execute("SELECT name FROM products WHERE id = 'prod_c'").fetchone() == ("C again",)


def test_a_row_seen_again_unchanged_takes_the_later_receipt_so_an_earlier_read_loaded_late_still_loses():
    """Night 1 reads A; a webhook read B at 05-02 (applied late); night 2 reads A again at 05-03 and leaves the
    unchanged row in place. The late B was observed before night 2's A: it must not win."""
    conn = duckdb.connect()
    WarehouseSession(conn).ensure_table(PRODUCTS)
    _merge(conn, [_product("prod_a", "2026-05-01T00:00:00Z", "A", {"US": {"status": "approved"}})])
    assert _merge(conn, [_product("prod_a", "2026-05-03T00:00:00Z", "A", {"US": {"status": "approved"}})]) == 0
    assert _merge(conn, [_product("prod_a", "2026-05-02T00:00:00Z", "B", {"US": {"status": "recalled"}})]) == 0
    assert conn.execute("SELECT name, _fetched_at FROM products").fetchall() == [("A", datetime(2026, 5, 3, tzinfo=UTC))]
    assert conn.execute("SELECT status FROM product_market_status").fetchall() == [("approved",)]


def test_a_nightly_load_never_overwrites_a_fresher_row_in_the_warehouse(make_service, tmp_path):
    service = make_service(kols=50, campaigns=2, products=3, signals=4)
    data_dir = tmp_path / "data"
    sync(service, data_dir)
    kol_id = sorted(table_rows(data_dir / "warehouse.duckdb", "kols"))[0]
    conn = duckdb.connect(str(data_dir / "warehouse.duckdb"))
    conn.execute("UPDATE kols SET full_name = 'Fresh From Webhook', updated_at = TIMESTAMPTZ '2030-01-01 00:00:00+00' WHERE id = ?", [kol_id])
    conn.close()

    summary = sync(service, data_dir)

    rows = table_rows(data_dir / "analytics.duckdb", "kols")
    assert rows[kol_id]["full_name"] == "Fresh From Webhook"
    assert summary.failed_checks == []
    assert len(rows) == 50


def test_rerunning_a_date_replaces_its_snapshot_and_keeps_tables_identical(make_service, tmp_path):
    service = make_service(kols=120, campaigns=5, products=5, signals=20)
    data_dir = tmp_path / "data"
    sync(service, data_dir)
    first = warehouse_state(data_dir / "analytics.duckdb")
    sync(service, data_dir)
    assert warehouse_state(data_dir / "analytics.duckdb") == first
    folder = data_dir / "lake" / "org=default" / "kols" / f"snapshot_date={today()}"
    # The snapshot, and its side file of the rows changed since the run before (none): not history.
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.parquet")) == ["changed/data.parquet", "data.parquet"]
    assert pq.ParquetFile(folder / "changed" / "data.parquet").metadata.num_rows == 0
    assert query(data_dir / "analytics.duckdb", "SELECT count(DISTINCT snapshot_date), count(*) FROM kols_history") == [(1, 120)]


class _Log:
    def __init__(self):
        self.messages = []

    def info(self, message):
        self.messages.append(message)


def test_a_second_writer_waits_for_the_warehouse_lock_instead_of_failing(tmp_path):
    warehouse = WarehouseResource(data_dir=str(tmp_path))
    holding, release, log = threading.Event(), threading.Event(), _Log()

    def first_writer():
        with warehouse.writer() as session:
            session.conn.execute("CREATE TABLE t AS SELECT 1 AS x")
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=first_writer)
    thread.start()
    assert holding.wait(10)
    result = {}

    def second_writer():
        with warehouse.writer(log) as session:
            result["x"] = session.conn.execute("SELECT x FROM t").fetchone()[0]

    second = threading.Thread(target=second_writer)
    second.start()
    deadline = datetime.now().timestamp() + 10
    while not any("Waiting for the warehouse lock" in m for m in log.messages):
        assert datetime.now().timestamp() < deadline, "the second writer never said it waits"
        threading.Event().wait(0.02)
    assert "x" not in result
    release.set()
    thread.join(10)
    second.join(10)
    assert result == {"x": 1}
    assert not (tmp_path / "analytics.duckdb").exists()  # writers never publish: the analytics asset does
    warehouse.publish_analytics()
    assert query(tmp_path / "analytics.duckdb", "SELECT x FROM t") == [(1,)]


def test_definitions_load_with_the_asset_graph_the_pools_and_a_running_nightly_schedule(monkeypatch):
    from pipelines.definitions import defs as load_defs

    for name in ("SALESFORCE_USERNAME", "SALESFORCE_INSTANCE_URL", "COMMOPS_CRM_CSV"):
        monkeypatch.delenv(name, raising=False)
    defs = load_defs()
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    names = ("kols", "campaigns", "products", "signals")
    warehouse = {f"warehouse/{n}" for n in names} | {"warehouse/kol_details"}
    webhooks = {"warehouse/webhook_events", "webhooks/applied"}
    crm = {"crm/contacts", "crm/kol_reconciliation", "crm/writeback"}
    marts = {f"marts/{m}" for m in ("kol_360", "campaign_funnel", "campaign_performance", "product_market_matrix",
                                    "kol_history")}
    staging = {key for key in keys if key.startswith("marts/staging/")}
    assert keys == {f"lake/{n}" for n in names} | warehouse | {"analytics"} | webhooks | crm | marts | staging
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.group_name == ("webhooks" if key.to_user_string() in webhooks else key.path[0])
        assert node.pools == (set() if key.path[0] in ("lake", "webhooks") else {"warehouse"})
    # analytics.duckdb is published once per run, after every warehouse write: lineage says what analysts read
    assert {k.to_user_string() for k in graph.get(dg.AssetKey(["analytics"])).parent_keys} == (
        warehouse | {"warehouse/webhook_events"} | crm | marts
    )
    for key in graph.get_all_asset_keys() - {dg.AssetKey(["analytics"]), dg.AssetKey(["webhooks", "applied"])}:
        if key.to_user_string() in staging:
            continue  # dbt staging views: renames, documented by their model
        metadata = graph.get(key).metadata
        assert "dagster/column_schema" in metadata
        if key.path[0] == "crm":
            continue  # hand-written assets: their own source is the reference
        if key.path[0] == "marts":  # dbt models: their SQL file
            (reference,) = metadata["dagster/code_references"].code_references
            assert reference.file_path.endswith(f"/{key.path[-1]}.sql")
            continue
        (reference,) = metadata["dagster/code_references"].code_references
        assert reference.file_path.endswith("sync/catalog.py") and reference.line_number
    schedule = defs.resolve_schedule_def("nightly_sync_schedule")
    assert schedule.cron_schedule == "0 2 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert schedule.job_name == "nightly_sync"
    # Partitioned by organization only: no backfill of past days offered.
    assert defs.resolve_job_def("nightly_sync").partitions_def == dg.DynamicPartitionsDefinition(name="orgs")
    nightly = set(defs.resolve_job_def("nightly_sync").graph.node_names())
    assert {"analytics", "marts"} <= nightly and not {"warehouse__webhook_events", "webhooks__applied"} & nightly
    assert not {name for name in nightly if name.startswith("crm__")}  # a CRM outage never fails the nightly sync
    assert set(defs.resolve_job_def("crm_reconciliation").graph.node_names()) == {
        "crm__contacts", "crm__kol_reconciliation", "crm__writeback", "analytics"
    }
    # one CRM reconciliation per organization, like the nightly sync
    assert defs.resolve_job_def("crm_reconciliation").partitions_def == dg.DynamicPartitionsDefinition(name="orgs")
    crm_schedule = defs.resolve_schedule_def("crm_reconciliation_schedule")
    assert crm_schedule.cron_schedule == "0 4 * * *"
    assert crm_schedule.default_status == dg.DefaultScheduleStatus.STOPPED  # no CRM configured here
    assert set(defs.resolve_job_def("apply_webhook_events").graph.node_names()) == {
        "warehouse__webhook_events", "analytics", "webhooks__applied"
    }
    sensor = defs.resolve_sensor_def("webhook_events_sensor")
    assert sensor.minimum_interval_seconds == 5 and sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_dagster_yaml_caps_the_warehouse_pool_at_the_runs_limit_and_runs_one_run_per_organization(tmp_path):
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).parents[2] / "dagster.yaml", tmp_path / "dagster.yaml")
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    try:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == config.run_queue_config.max_concurrent_runs == 4
        (limit,) = config.run_queue_config.tag_concurrency_limits
        assert limit == {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    finally:
        instance.dispose()


def test_assets_materialize_on_their_own_with_dg_materialize(make_service, tmp_path):
    from assets.analytics import build_analytics_asset
    from assets.lake import SNAPSHOT_ASSETS
    from assets.warehouse import TABLE_ASSETS
    from pipelines.definitions import build_resources
    from resources.settings import load_settings
    from tests.pipeline.sync_support import api_key_in_env

    service = make_service(products=7)
    selected = [a for a in SNAPSHOT_ASSETS + TABLE_ASSETS if a.key.path[-1] == "products"]
    selected.append(build_analytics_asset([selected[-1].key]))
    settings = load_settings(base_url=service.base_url, data_dir=str(tmp_path))
    with api_key_in_env(service.api_key):
        result = dg.materialize(selected, instance=with_orgs(dg.DagsterInstance.ephemeral()),
                                resources=build_resources(settings), partition_key="default")
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    assert query(tmp_path / "analytics.duckdb", "SELECT count(*) FROM products") == [(7,)]


def test_kol_merges_compare_updated_at_first_and_the_receipt_time_on_a_tie():
    from sync.catalog import KOLS

    def kol(kol_id, name, updated_at, fetched_at):
        return {"id": kol_id, "full_name": name, "specialties": ["cardiology"], "tier": "tier_3", "is_archived": False,
                "created_at": "2026-01-01T00:00:00Z", "updated_at": updated_at, "_fetched_at": fetched_at}

    def merge(records):
        return _merge(conn, records, KOLS)

    conn = duckdb.connect()
    WarehouseSession(conn).ensure_table(KOLS)
    # What a webhook-driven refetch wrote at 02:05: a change made in the same second as the nightly read.
    merge([kol("kol_a", "Webhook A", "2026-06-01T02:00:00Z", "2026-06-01T02:05:00Z"),
           kol("kol_b", "Webhook B", "2026-06-01T02:00:00Z", "2026-06-01T02:05:00Z")])
    written = merge([
        kol("kol_a", "Nightly A", "2026-06-01T02:00:00Z", "2026-06-01T02:00:01Z"),  # same updated_at, read earlier: kept out
        kol("kol_b", "Nightly B", "2026-06-01T02:00:02Z", "2026-06-01T02:00:01Z"),  # newer updated_at: wins whatever the receipt
    ])
    assert written == 1
    assert dict(conn.execute("SELECT id, full_name FROM kols").fetchall()) == {"kol_a": "Webhook A", "kol_b": "Nightly B"}


def _kol(kol_id: str, name: str, updated_at: str | None, fetched_at: str) -> dict:
    return {"id": kol_id, "full_name": name, "specialties": ["cardiology"], "tier": "tier_1", "is_archived": False,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": updated_at, "_fetched_at": fetched_at}


def test_one_newer_wins_rule_within_a_batch_and_against_the_table():
    from sync.catalog import KOLS

    dated = _kol("kol_a", "Dated, fetched first", "2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z")
    undated = _kol("kol_a", "Undated, fetched later", None, "2026-05-03T00:00:00Z")
    # One at a time: a NULL updated_at defers to _fetched_at, so the later-fetched row wins.
    one_by_one = duckdb.connect()
    WarehouseSession(one_by_one).ensure_table(KOLS)
    _merge(one_by_one, [dated], KOLS)
    _merge(one_by_one, [undated], KOLS)
    # The same two rows in one batch, in either order, must give the same row (the rule that used to
    # pick within a batch sorted NULLs last, and kept the dated row).
    for batch in ([dated, undated], [undated, dated]):
        together = duckdb.connect()
        WarehouseSession(together).ensure_table(KOLS)
        assert _merge(together, batch, KOLS) == 1
        assert together.execute("SELECT full_name FROM kols").fetchall() == [("Undated, fetched later",)]
    assert one_by_one.execute("SELECT full_name FROM kols").fetchall() == [("Undated, fetched later",)]


def test_a_newer_dated_row_in_a_batch_beats_an_older_one_whatever_the_fetch_order():
    from sync.catalog import KOLS

    newer = _kol("kol_b", "Updated later, fetched first", "2026-05-05T00:00:00Z", "2026-05-06T00:00:00Z")
    older = _kol("kol_b", "Updated earlier, fetched later", "2026-05-04T00:00:00Z", "2026-05-07T00:00:00Z")
    conn = duckdb.connect()
    WarehouseSession(conn).ensure_table(KOLS)
    _merge(conn, [older, newer], KOLS)
    assert conn.execute("SELECT full_name FROM kols").fetchall() == [("Updated later, fetched first",)]


@pytest.mark.parametrize("kind", ["arrow", "lake"])
def test_an_id_twice_in_a_later_load_keeps_the_newest_of_the_two_against_the_table(kind, tmp_path):
    """A later load compares before it counts ids: an id twice in it (known to the table, or new) must still
    come down to the newest of the two, measured against the table as a single row would be."""
    from sync.catalog import KOLS

    conn = duckdb.connect()
    session = WarehouseSession(conn)
    session.ensure_table(KOLS)
    first = [_kol("kol_a", "A", "2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z"),
             _kol("kol_b", "B", "2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z")]
    session.merge(KOLS, _source(conn, "night1", first, KOLS, kind, tmp_path), org="default")
    second = [_kol("kol_a", "A newer", "2026-05-03T00:00:00Z", "2026-05-04T00:00:00Z"),
              _kol("kol_a", "A older than the table", "2026-04-01T00:00:00Z", "2026-05-05T00:00:00Z"),
              _kol("kol_c", "C first", "2026-05-01T00:00:00Z", "2026-05-04T00:00:00Z"),
              _kol("kol_c", "C updated", "2026-05-02T00:00:00Z", "2026-05-03T00:00:00Z"),
              _kol("kol_b", "B", "2026-05-01T00:00:00Z", "2026-05-04T00:00:00Z")]  # unchanged
    assert session.merge(KOLS, _source(conn, "night2", second, KOLS, kind, tmp_path), org="default") == 2
    assert sorted(conn.execute("SELECT id, full_name FROM kols").fetchall()) == [
        ("kol_a", "A newer"), ("kol_b", "B"), ("kol_c", "C updated")]


def _old_path(conn, spec, source: str, org: str, snapshot_date: str) -> None:
    """The write path before rows unchanged since the last load were left in place, as the reference: every incoming row not older than the table's is
    deleted and inserted again (children rebuilt), whether or not it changed."""
    from resources.warehouse import _not_older

    conn.execute(f"CREATE OR REPLACE TEMP TABLE _in AS SELECT '{org}' AS org, *, DATE '{snapshot_date}' AS _snapshot_date, "
                 f"now() AS _loaded_at FROM {source}")
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _ids AS SELECT i.id FROM _in i LEFT JOIN {spec.table} t "
                 f"ON t.org = i.org AND t.id = i.id WHERE t.id IS NULL OR {_not_older(spec.version, 'i', 't')}")
    conn.execute(f"DELETE FROM {spec.table} WHERE id IN (SELECT id FROM _ids)")
    conn.execute(f"INSERT INTO {spec.table} BY NAME SELECT * FROM _in WHERE id IN (SELECT id FROM _ids)")


def _source(conn, name: str, records: list[dict], spec, kind: str, tmp_path) -> str:
    """`records` as a merge source: a registered Arrow table (hashed by the merge), or a Parquet file written as
    the lake writes a snapshot, each row's digest hashed as it was written (read, not hashed, by the merge)."""
    batch = RecordConverter(spec.schema).to_batch(records)
    if kind == "arrow":
        conn.register(name.replace("/", "_"), pa.Table.from_batches([batch]))
        return name.replace("/", "_")
    (tmp_path / name).mkdir(parents=True)
    staged = StagedSnapshot(tmp_path / name, spec.schema, key=spec.key, newest_by="_fetched_at",
                            digest=content_fields(spec.schema, spec.observed))
    staged.write(batch)
    staged.finish()
    staged.close()
    return read_parquet(staged.path)


@pytest.mark.parametrize("kind", ["arrow", "lake"])
def test_a_second_night_rewrites_only_changed_rows_and_leaves_the_tables_the_old_path_left(kind, tmp_path):
    from sync.catalog import KOLS

    first = [_kol(f"kol_{i:04d}", f"Dr {i}", "2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z") for i in range(300)]
    second = [dict(row, _fetched_at="2026-05-03T00:00:00Z") for row in first]  # the next night: fetched again
    for i in range(0, 300, 50):  # 2% changed, with a newer updated_at
        second[i].update(full_name=f"Dr {i} (moved)", updated_at="2026-05-02T12:00:00Z")
    second[7].update(full_name="Stale name", updated_at="2026-04-01T00:00:00Z")  # older than the table's: loses
    second.append(_kol("kol_new", "Dr New", "2026-05-02T00:00:00Z", "2026-05-03T00:00:00Z"))
    results = {}
    for path in ("new", "old"):
        conn = duckdb.connect()
        session = WarehouseSession(conn)
        session.ensure_table(KOLS)
        session.merge(KOLS, _source(conn, f"{path}/night1", first, KOLS, kind, tmp_path), org="default", snapshot_date="2026-05-02")
        before = dict(conn.execute("SELECT id, _loaded_at FROM kols").fetchall())
        incoming2 = _source(conn, f"{path}/night2", second, KOLS, kind, tmp_path)
        if path == "new":
            written = session.merge(KOLS, incoming2, org="default", snapshot_date="2026-05-03")
            assert written == 6 + 1  # the changed rows and the new one: nothing else was rewritten
            after = dict(conn.execute("SELECT id, _loaded_at FROM kols").fetchall())
            untouched = {i for i in before if before[i] == after[i]}
            assert untouched == set(before) - {f"kol_{i:04d}" for i in range(0, 300, 50)}
        else:
            _old_path(conn, KOLS, incoming2, "default", "2026-05-03")
        columns = [f'"{name}"' for (name,) in conn.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'kols' AND column_name NOT IN "
            "('_loaded_at', '_fetched_at', '_digest') ORDER BY column_index").fetchall()]
        results[path] = sorted(conn.execute(f"SELECT {', '.join(columns)} FROM kols").fetchall(), key=repr)
    assert results["new"] == results["old"]
    assert "Stale name" not in {row[2] for row in results["new"]}  # (org, id, full_name, ...): the newer row won
    assert len({row[1] for row in results["new"]}) == 301


def test_a_table_made_with_a_primary_key_is_rebuilt_without_it_keeping_its_rows_and_one_row_per_id():
    """A primary key is an index DuckDB must hold in memory: a warehouse made with one (before 1M-row
    tables) is rebuilt without it on the next write, its rows and comments kept, and merges still
    leave one row per id."""
    conn = duckdb.connect()
    session = WarehouseSession(conn)
    session.ensure_table(PRODUCTS)
    _merge(conn, [_product("prod_a", "2026-05-01T00:00:00Z", "A", {"US": {"status": "approved"}})])
    columns = conn.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'products'").fetchall()
    conn.execute("DROP TABLE products")  # the table as ensure_table made it before: (org, id) its primary key
    conn.execute(f"CREATE TABLE products ({', '.join(f'{n} {t}' for n, t in columns)}, PRIMARY KEY (org, id))")
    conn.execute("INSERT INTO products (org, id, name, _fetched_at) VALUES ('default', 'prod_old', 'Old', TIMESTAMPTZ '2026-05-01 00:00:00+00')")

    session.ensure_table(PRODUCTS)
    assert conn.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'products' "
                        "AND constraint_type = 'PRIMARY KEY'").fetchall() == [(0,)]
    assert conn.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'products'").fetchall() == columns
    assert conn.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 'products'").fetchall()[0][0]
    _merge(conn, [_product("prod_old", "2026-05-02T00:00:00Z", "Old, renamed", {}),
                  _product("prod_b", "2026-05-02T00:00:00Z", "B", {})])
    assert conn.execute("SELECT id, name FROM products ORDER BY id").fetchall() == [
        ("prod_b", "B"), ("prod_old", "Old, renamed")]


def test_an_unchanged_table_is_ensured_without_catalog_writes_and_a_changed_comment_is_written_back():
    """Every merge ensures its table; each COMMENT is a catalog change, so only the comments that differ from
    the catalog's (a new column, an edited description, one changed by hand) are written."""
    conn = duckdb.connect()
    WarehouseSession(conn).ensure_table(PRODUCTS)
    comments = "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE table_name IN ('products', 'product_market_status')"
    made = sorted(conn.execute(comments).fetchall())
    assert all(comment for _, _, comment in made)

    executed: list[str] = []

    class Recording:
        def __getattr__(self, name):
            return getattr(conn, name)

        def execute(self, sql, *args):
            executed.append(sql)
            return conn.execute(sql, *args)

    WarehouseSession(Recording()).ensure_table(PRODUCTS)
    assert [sql for sql in executed if sql.startswith("COMMENT")] == []

    conn.execute("COMMENT ON COLUMN products.name IS 'changed by hand'")
    conn.execute("COMMENT ON TABLE product_market_status IS NULL")
    executed.clear()
    WarehouseSession(Recording()).ensure_table(PRODUCTS)
    assert len([sql for sql in executed if sql.startswith("COMMENT")]) == 2
    assert sorted(conn.execute(comments).fetchall()) == made
    assert conn.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 'product_market_status'").fetchone()[0]


def test_a_signals_long_text_is_stored_zstd_compressed_and_reads_back_whole(tmp_path):
    """Signals' content and AI summary are paragraphs: zstd keeps them in less than half the space DuckDB's
    default string encodings take, and commits them faster (docs/pipeline.md#long-text-zstd); short strings
    keep the defaults."""
    conn = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    WarehouseSession(conn).ensure_table(SIGNALS)
    paragraph = "Field safety notice for the infusion pump line: firmware 4.2 corrects a dosing alarm. " * 8
    signals = [{"id": f"sig_{i:05d}", "title": f"Notice {i % 7}", "content": f"{i} {paragraph}", "ai_summary": f"{i} {paragraph[:200]}",
                "published_at": "2026-11-01T00:00:00Z", "fetched_at": "2026-11-01T00:00:00Z", "_fetched_at": "2026-11-02T00:00:00Z"}
               for i in range(3000)]
    assert _merge(conn, signals, SIGNALS) == 3000
    conn.execute("CHECKPOINT")
    storage = dict(conn.execute("SELECT column_name, list(DISTINCT compression) FROM pragma_storage_info('signals') "
                                "WHERE segment_type = 'VARCHAR' GROUP BY ALL").fetchall())
    assert storage["content"] == ["ZSTD"] and storage["ai_summary"] == ["ZSTD"]
    assert "ZSTD" not in storage["title"]
    assert conn.execute("SELECT content, ai_summary FROM signals WHERE id = 'sig_02999'").fetchone() == (
        f"2999 {paragraph}", f"2999 {paragraph[:200]}")

    # A table made before (no compression clause) is ensured and merged into as it is.
    conn.execute("CREATE TABLE plain AS SELECT * FROM signals; DROP TABLE signals; ALTER TABLE plain RENAME TO signals")
    WarehouseSession(conn).ensure_table(SIGNALS)
    assert _merge(conn, signals[:10], SIGNALS) == 0  # the same rows: nothing rewritten
    assert "COMPRESSION" not in conn.execute("SELECT sql FROM duckdb_tables() WHERE table_name = 'signals'").fetchone()[0]


def test_sessions_write_row_groups_of_their_size_into_a_warehouse_made_before(tmp_path):
    """A writer session attaches the file with the resource's `row_group_size`, so a first load writes each full
    row group as it fills (docs/pipeline.md#row-groups); a warehouse a plain connection made keeps its tables and
    its name in the session's catalog."""
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as before:
        before.execute("CREATE TABLE notes AS SELECT 'kept' AS note")
    warehouse = WarehouseResource(data_dir=str(tmp_path), row_group_size=4096)
    products = [_product(f"prod_{i:05d}", "2026-05-01T00:00:00Z", f"Pump {i}", {}) for i in range(10_000)]
    with warehouse.writer() as session:
        assert session.conn.execute("SELECT current_database()").fetchone()[0] == "warehouse"
        assert session.conn.execute("SELECT note FROM notes").fetchall() == [("kept",)]
        session.ensure_table(PRODUCTS)
        assert _merge(session.conn, products) == 10_000
    with duckdb.connect(str(warehouse.path), read_only=True) as conn:
        groups = conn.execute("SELECT list(DISTINCT row_group_id ORDER BY row_group_id) FROM pragma_storage_info('products')").fetchone()[0]
        assert groups == [0, 1, 2]  # 4096 + 4096 + 1808 rows
        assert conn.execute("SELECT count(*), count(DISTINCT id) FROM products").fetchone() == (10_000, 10_000)


def test_the_reconciliation_session_gets_its_own_threads_and_memory_and_other_sessions_keep_the_warehouses(tmp_path):
    warehouse = WarehouseResource(data_dir=str(tmp_path))
    setting = "SELECT current_setting('threads'), current_setting('memory_limit')"
    with warehouse.writer(threads=warehouse.reconcile_threads, memory_limit=warehouse.reconcile_memory_limit) as session:
        threads, memory = session.conn.execute(setting).fetchone()
        assert (threads, memory.replace(" ", "")) == (2, "953.6MiB")  # DuckDB shows 1GB in MiB
    with warehouse.writer() as session:
        threads, memory = session.conn.execute(setting).fetchone()
        assert (threads, memory.replace(" ", "")) == (1, "122.0MiB")


def test_a_session_ends_with_the_file_whole_once_another_write_transaction_of_the_process_ends(tmp_path):
    """DuckDB refuses a CHECKPOINT while another connection of the same database has a write open: the
    session waits for it, so the file it lets go of holds every commit without its WAL."""
    warehouse = WarehouseResource(data_dir=str(tmp_path))
    with warehouse.writer() as session:
        session.conn.execute("CREATE TABLE notes AS SELECT 1 AS n")
        other = session.conn.cursor()
        other.execute("USE warehouse")
        other.execute("BEGIN TRANSACTION")
        other.execute("UPDATE notes SET n = 2")  # an update holds DuckDB's checkpoint lock until it commits

        def commit_later() -> None:
            time.sleep(0.3)  # still open when the session ends
            other.execute("COMMIT")
            other.close()

        committer = threading.Thread(target=commit_later)
        committer.start()
    committer.join()
    assert not (tmp_path / "warehouse.duckdb.wal").exists()
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT list(n) FROM notes").fetchone()[0] == [2]
