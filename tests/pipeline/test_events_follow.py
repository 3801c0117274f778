"""`commops events follow`: events applied as they arrive by a long-lived process, each batch a run in the
Dagster instance, the sensor standing down while it beats and taking over when it stops; and the publish
that copies only the rows a run changed, exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa

from assets.analytics import ANALYTICS_KEY
from assets.webhooks import event_ids_of, run_config
from pipelines.jobs import APPLY_WEBHOOK_EVENTS
from pipelines.sensors import webhook_events_sensor
from resources.orgs_resource import OrgsResource
from resources.warehouse import WarehouseResource
from resources.webhooks import InboxResource
from alerts.alerter import opened_alerter
from sync.catalog import CATALOG, PRODUCTS
from sync.records import RecordConverter
from tests.pipeline.sync_support import query, sync
from tests.pipeline.webhook_stack import Stack, new_kol, stack  # noqa: F401 (fixture)
from tests.receiver.conftest import wait_until
from pipelines.follower_lease import FOLLOWER_TAG, Beat, read_beat, write_beat

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 90  # the follower's start (the code location's import) and a run, on 2 shared cores


def _tick(stack: Stack, instance: dg.DagsterInstance, cursor: str | None = None) -> dg.SensorResult:
    resources = {"inbox": InboxResource(data_dir=str(stack.data_dir)),
                 "orgs": OrgsResource(data_dir=str(stack.data_dir), default_base_url=stack.service.base_url)}
    context = dg.build_sensor_context(instance=instance, definitions=stack.defs, resources=resources, cursor=cursor)
    return webhook_events_sensor(context)


def _tables(path: Path) -> dict[str, list[str]]:
    """Every current-state and child table, every column, sorted: what analysts read, exactly."""
    names = [spec.table for spec in CATALOG] + [child.name for spec in CATALOG for child in spec.children]
    conn = duckdb.connect(str(path), read_only=True)
    try:
        present = {name for (name,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        return {name: sorted(map(repr, conn.execute(f"SELECT * FROM {name}").fetchall())) for name in names if name in present}
    finally:
        conn.close()


def _full_name(analytics: Path, kol_id: str) -> str | None:
    rows = query(analytics, f"SELECT full_name FROM kols WHERE id = '{kol_id}'") if analytics.exists() else []
    return rows[0][0] if rows else None


def test_the_follower_applies_each_event_in_a_run_of_the_instance_publishing_only_what_changed(stack: Stack, tmp_path: Path) -> None:
    sync(stack.service, stack.data_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env |= {"COMMOPS_BASE_URL": stack.service.base_url, "COMMOPS_API_KEY": stack.service.api_key,
            "COMMOPS_DATA_DIR": str(stack.data_dir)}
    log = tmp_path / "follower.log"
    with open(log, "wb") as out:
        follower = subprocess.Popen([sys.executable, "-m", "commops_cli", "events", "follow", "--poll-seconds", "0.1"],
                                    cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "applying events as they arrive" in log.read_text() or follower.poll() is not None,
                   timeout=DEADLINE)
        assert follower.poll() is None, log.read_text()[-2000:]
        kol = stack.change(lambda conn, org: new_kol(conn, org, "Iris Follow"))
        wait_until(lambda: _full_name(stack.analytics, kol["id"]) == "Iris Follow", timeout=DEADLINE, interval=0.1)
        from service.store import kols

        stack.change(lambda conn, org: kols.update_kol(conn, org, kol["id"], {"full_name": "Iris Followed"}))
        wait_until(lambda: _full_name(stack.analytics, kol["id"]) == "Iris Followed", timeout=DEADLINE, interval=0.1)
        wait_until(lambda: stack.inbox.counts()["applied"] == 2, timeout=DEADLINE, interval=0.1)

        with dg.DagsterInstance.from_config(str(stack.data_dir / "dagster_home")) as instance:
            finished = dg.RunsFilter(job_name=APPLY_WEBHOOK_EVENTS, statuses=[dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE])
            runs = wait_until(lambda: (done := instance.get_runs(filters=finished)) and len(done) == 2 and done,
                              timeout=DEADLINE, interval=0.1)
            assert {run.status for run in runs} == {dg.DagsterRunStatus.SUCCESS}
            assert all(run.tags.get(FOLLOWER_TAG) for run in runs)
            assert sorted(id_ for run in runs for id_ in event_ids_of(run.run_config)) == sorted(
                event.id for event in stack.inbox.get([id_ for run in runs for id_ in event_ids_of(run.run_config)]))
            published = instance.get_latest_materialization_event(ANALYTICS_KEY).asset_materialization.metadata
            assert published["copied"].value.startswith("changed rows of")
            standing_down = _tick(stack, instance)
            assert not standing_down.run_requests and "events follower" in standing_down.skip_reason.skip_message

            follower.send_signal(signal.SIGTERM)
            assert follower.wait(timeout=30) == 0, log.read_text()[-2000:]
            assert read_beat(instance) is None  # released: the sensor applies the next events at its next tick
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert _tables(stack.analytics) == _tables(stack.data_dir / "warehouse.duckdb")
    assert "Iris" not in log.read_text()  # no personal data in what it prints


def test_when_the_follower_stops_beating_the_sensor_fails_its_unfinished_run_and_requests_the_events_again(
        stack: Stack) -> None:
    kol = stack.change(lambda conn, org: new_kol(conn, org, "Hal Handover"))
    [event] = stack.wait_for_events(1)
    instance = stack.instance
    job = stack.defs.resolve_job_def(APPLY_WEBHOOK_EVENTS)
    orphan = instance.create_run_for_job(job, run_id=str(uuid.uuid4()), run_config=run_config([event.id]),
                                         tags={FOLLOWER_TAG: "gone-host:4242", "dagster/partition": "default"},
                                         status=dg.DagsterRunStatus.STARTED)
    write_beat(instance, Beat("gone-host:4242", 7))

    alive = _tick(stack, instance)  # first sight of the beat: alive until it stops moving for STALE_SECONDS
    assert not alive.run_requests and "gone-host:4242" in alive.skip_reason.skip_message
    seen = json.loads(alive.cursor)["follower"]
    stale = json.dumps({"follower": {**seen, "seen_at": seen["seen_at"] - 60}})

    taken_over = _tick(stack, instance, cursor=stale)
    assert instance.get_run_by_id(orphan.run_id).status == dg.DagsterRunStatus.FAILURE
    assert read_beat(instance) is None
    [request] = taken_over.run_requests
    assert event_ids_of(request.run_config) == [event.id]
    assert stack.execute(request).success
    assert _full_name(stack.analytics, kol["id"]) == "Hal Handover"
    [incident] = _open_incidents(stack)  # the operators are told, once
    assert (incident.incident, incident.kind) == ("follower", "follower_stopped")
    assert "gone-host:4242 stopped beating" in incident.cause and "1 run(s)" in incident.cause
    assert _tick(stack, instance, cursor=taken_over.cursor).skip_reason is not None
    assert len(_open_incidents(stack)) == 1

    write_beat(instance, Beat("new-host:77", 1))  # a follower at work again resolves it
    assert "new-host:77" in _tick(stack, instance, cursor=taken_over.cursor).skip_reason.skip_message
    assert _open_incidents(stack) == []


def _open_incidents(stack: Stack) -> list:
    with opened_alerter(InboxResource(data_dir=str(stack.data_dir)).location) as alerter:
        return alerter.store.open_incidents()


def _product_rows(name: str, day: int, product_id: str) -> pa.Table:
    record = {"id": product_id, "name": name, "status": "active", "market_status": {"US": {"status": "approved"}},
              "created_at": "2026-01-01T00:00:00Z", "_fetched_at": f"2026-12-{day:02d}T00:00:00Z"}
    return pa.Table.from_batches([RecordConverter(PRODUCTS.schema).to_batch([record])])


def _merge_product(warehouse: WarehouseResource, name: str, day: int, track: bool, product_id: str = "prod_0001") -> None:
    with warehouse.writer(track=track) as session:
        session.ensure_table(PRODUCTS)
        session.conn.register("incoming", _product_rows(name, day, product_id))
        session.merge(PRODUCTS, "incoming", org="default")
        session.conn.unregister("incoming")


def test_a_publish_copies_only_the_tracked_rows_when_nothing_else_changed_and_the_whole_warehouse_otherwise(
        tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    run = WarehouseResource(data_dir=str(data_dir))
    _merge_product(run, "First", 1, track=False)
    run.publish_analytics()
    assert run.last_publish == "whole warehouse"

    _merge_product(run, "Second name", 2, track=True)  # a product and its child rows (product_market_status)
    run.publish_analytics()
    assert run.last_publish == "changed rows of 1 table(s)"
    assert _tables(run.analytics_path) == _tables(run.path)
    assert query(run.analytics_path, "SELECT name FROM products") == [("Second name",)]

    other = WarehouseResource(data_dir=str(data_dir))  # another process's write, never published
    _merge_product(other, "Third, by another", 3, track=False, product_id="prod_0002")
    _merge_product(run, "Fourth name", 4, track=True)
    run.publish_analytics()
    assert run.last_publish == "whole warehouse"  # the chain is broken: the other write must reach analysts too
    assert _tables(run.analytics_path) == _tables(run.path)
    assert query(run.analytics_path, "SELECT name FROM products ORDER BY id") == [("Fourth name",), ("Third, by another",)]

    run.amend_published(lambda conn: conn.execute("CREATE TABLE note AS SELECT 1 AS n"))  # not the warehouse's
    _merge_product(run, "Fifth", 5, track=True)
    run.publish_analytics()
    assert run.last_publish == "whole warehouse"
    assert query(run.analytics_path, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'note'") == [(0,)]
