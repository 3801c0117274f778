"""Sync health as tables: `sync_runs` and `table_loads` in analytics.duckdb say exactly what each nightly run
did (the spec server counts the requests it answered), a failed run gets its row too, `data_as_of` names
the last landed load; the volume and schema-drift checks warn, the drift once per new field.

The landed runs are the nightly job without its dbt marts (`_nightly`): the marts take most of a run's time
and have tests of their own; every step that measures what sync_runs and table_loads hold runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import dagster as dg
import pytest

from commops_cli.in_process import QUIET_CONSOLE, job_runner
from commops_cli.sync_checks import SyncError
from pipelines.definitions import build_resources
from pipelines.health_sensor import sync_health_failure_sensor
from pipelines.jobs import NIGHTLY_SYNC
from resources.orgs import DEFAULT_ORG
from resources.settings import load_settings
from resources.warehouse import WarehouseResource
from tests.pipeline.sync_support import api_key_in_env, query, sync
from tests.spec_server import SpecServer

TABLES = ("kols", "campaigns", "products", "signals")
VOLUME = "row_count_within_recent_loads"
DRIFT = "no_new_fields"


@dataclass(frozen=True)
class Failure:
    check: str  # asset:check
    blocking: bool
    description: str


@dataclass(frozen=True)
class Night:
    run_id: str
    check_failures: list[Failure]


def _nightly(server, data, instance: dg.DagsterInstance | None = None, *, lands: bool = True) -> Night:
    """A nightly run of the default organization, in process, without the dbt marts; it `lands` or fails."""
    settings = load_settings(base_url=server.base_url, data_dir=data)
    with api_key_in_env(server.api_key), job_runner(settings, build_resources(settings),
                                                    instance or dg.DagsterInstance.ephemeral(), marts=False) as runner:
        job = runner.definitions.resolve_job_def(NIGHTLY_SYNC)
        runner.instance.add_dynamic_partitions("orgs", [DEFAULT_ORG])
        result = job.execute_in_process(
            instance=runner.instance, partition_key=DEFAULT_ORG, raise_on_error=False, run_config=QUIET_CONSOLE)
    assert result.success is lands
    return Night(result.run_id, [
        Failure(f"{e.asset_key.to_user_string()}:{e.check_name}", bool(e.blocking) and e.severity.value == "ERROR",
                e.description or "") for e in result.get_asset_check_evaluations() if not e.passed])


def _requests(server: SpecServer) -> Counter:
    """Requests the server answered, by list (`kols`, ...), and the KOL details' (`kol_details`)."""
    return Counter("kol_details" if path.count("/") > 2 else path.removeprefix("/v1/") for path, _ in server.requests)


def _runs(data, columns: str) -> list[tuple]:
    return query(data / "analytics.duckdb", f"SELECT {columns} FROM sync_runs ORDER BY started_at")


def _loads(data, run_id: str, columns: str) -> dict[str, tuple]:
    rows = query(data / "analytics.duckdb",
                 f"SELECT table_name, {columns} FROM table_loads WHERE run_id = '{run_id}' ORDER BY table_name")
    return {row[0]: row[1:] for row in rows}


def _warnings(summary, check: str) -> dict[str, str]:
    """The failed (non-blocking) `check` of each table: its description."""
    return {failure.check.split(":")[0].removeprefix("warehouse/"): failure.description
            for failure in summary.check_failures if failure.check.endswith(f":{check}") and not failure.blocking}


def test_sync_runs_and_table_loads_equal_what_two_runs_did(tmp_path):
    data = tmp_path / "data"
    with SpecServer(kols=20, archived_kols=2, campaigns=3, products=3, signals=4) as server:
        first = _nightly(server, data)
        before = _requests(server)
        updated, archived = server.active_kol_ids()[:2]
        server.update("kols", updated, title="Professor")
        server.archive_kols([archived])
        server.create_kols(1)
        second = _nightly(server, data)
        spent = _requests(server) - before

    assert _runs(data, "run_id, org, outcome, failed_steps, warned_checks, tables_landed, requests, responses_429, "
                       "rows_inserted, rows_updated, rows_unchanged, rows_archived, rows_in_flux, unreadable_values, "
                       "new_fields") == [
        (first.run_id, "default", "landed", None, None, 4, sum(before.values()), 0, 32, 0, 0, 0, 0, 0, 0),
        (second.run_id, "default", "landed", None, None, 4, sum(spent.values()), 0, 1, 2, 30, 1, 0, 0, 0),
    ]
    columns = ("outcome, rows_snapshot, rows_total, rows_inserted, rows_updated, rows_unchanged, rows_archived, "
               "requests, responses_429, rows_in_flux, unreadable_values, extra_fields, new_fields")
    assert _loads(data, first.run_id, columns) == {
        "campaigns": ("landed", 3, 3, 3, 0, 0, None, before["campaigns"], 0, 0, 0, {}, {}),
        "kols": ("landed", 22, 22, 22, 0, 0, 0, before["kols"], 0, 0, 0, {}, {}),
        "products": ("landed", 3, 3, 3, 0, 0, None, before["products"], 0, 0, 0, {}, {}),
        "signals": ("landed", 4, 4, 4, 0, 0, None, before["signals"], 0, 0, 0, {}, {}),
    }
    assert _loads(data, second.run_id, columns) == {
        "campaigns": ("landed", 3, 3, 0, 0, 3, None, spent["campaigns"], 0, 0, 0, {}, {}),
        "kols": ("landed", 23, 23, 1, 2, 20, 1, spent["kols"], 0, 0, 0, {}, {}),
        "products": ("landed", 3, 3, 0, 0, 3, None, spent["products"], 0, 0, 0, {}, {}),
        "signals": ("landed", 4, 4, 0, 0, 4, None, spent["signals"], 0, 0, 0, {}, {}),
    }
    # Times: the run spans its tables' listings; data_as_of names the second run's listing of each table.
    (started, ended, duration), = query(data / "analytics.duckdb", "SELECT started_at, ended_at, duration_seconds "
                                        f"FROM sync_runs WHERE run_id = '{second.run_id}'")
    assert started < ended and duration == pytest.approx((ended - started).total_seconds(), abs=0.002)
    as_of = {table: row[0] for table, row in _loads(data, second.run_id, "as_of").items()}
    assert all(started < moment < ended for moment in as_of.values()), as_of
    assert query(data / "analytics.duckdb", "SELECT table_name, as_of, run_id FROM data_as_of ORDER BY table_name") == [
        (table, as_of[table], second.run_id) for table in sorted(TABLES)]
    # Commented like every other table.
    uncommented = query(data / "analytics.duckdb",
                        "SELECT table_name, column_name FROM duckdb_columns() WHERE table_name IN "
                        "('sync_runs', 'table_loads', 'data_as_of') AND coalesce(comment, '') = ''")
    assert uncommented == []
    assert query(data / "analytics.duckdb", "SELECT count(*) FROM duckdb_tables() WHERE table_name IN "
                 "('sync_runs', 'table_loads') AND coalesce(comment, '') <> ''") == [(2,)]


def test_failed_and_blocked_runs_get_their_rows_and_publish_nothing_else(tmp_path):
    data = tmp_path / "data"
    with SpecServer(kols=5, campaigns=2, products=2, signals=2) as server:
        first = _nightly(server, data)
        server.create("kols", 1, ids=("not_a_kol_id",))  # fails the snapshot's blocking id check
        with pytest.raises(SyncError):  # commops sync's path: the run ends blocked, then its rows are written
            sync(server, data)
        with pytest.raises(SyncError):  # the run fails at its first requests
            sync(SimpleNamespace(base_url=server.base_url, api_key="spec_revoked"), data)

    (blocked, *blocked_row), (failed, *failed_row) = _runs(data, "run_id, outcome, failed_steps, tables_landed")[1:]
    assert blocked_row == ["blocked by checks", "lake/kols:ids_unique_and_prefixed", 3]
    assert _loads(data, blocked, "outcome, rows_snapshot, rows_inserted") == {
        "kols": ("blocked by checks", 6, None), "campaigns": ("landed", 2, 0), "products": ("landed", 2, 0),
        "signals": ("landed", 2, 0)}
    assert failed_row == ["failed", ", ".join(f"lake__{table}" for table in sorted(TABLES)), 0]
    assert _loads(data, failed, "outcome, rows_snapshot, requests") == {table: ("failed", None, None) for table in TABLES}
    # Neither published anything else: the KOLs analysts read are the first run's, and so is their as of.
    assert query(data / "analytics.duckdb", "SELECT count(*) FROM kols") == [(5,)]
    assert query(data / "analytics.duckdb", "SELECT DISTINCT run_id FROM data_as_of") == [(first.run_id,)]


def test_a_big_drop_in_a_tables_rows_warns_and_the_bounds_follow_the_settings(tmp_path, monkeypatch):
    data = tmp_path / "data"
    with SpecServer(kols=30, campaigns=3, products=3, signals=4) as server:
        first = _nightly(server, data)
        assert _warnings(first, VOLUME) == {}
        server.delete("kols", server.active_kol_ids()[:10])
        dropped = _nightly(server, data)  # landed: the check warns
        monkeypatch.setenv("COMMOPS_VOLUME_MAX_DROP", "0.5")
        allowed = _nightly(server, data)

    assert _warnings(dropped, VOLUME) == {"kols": "20 rows against a median of 30 over the last 1 loads (-33%)"}
    assert _runs(data, "outcome, warned_checks")[1] == ("landed", f"warehouse/kols:{VOLUME}")
    assert _warnings(allowed, VOLUME) == {}  # 20 against the median 25 of 30 and 20: within 50%


def test_a_new_field_outside_the_spec_warns_the_night_it_appears_named_with_its_count(tmp_path):
    data = tmp_path / "data"
    with SpecServer(kols=5, campaigns=4, products=3, signals=2) as server:
        _nightly(server, data)
        campaigns = [row["id"] for row in server.truth("campaigns")]
        for campaign in campaigns[:2]:
            server.update("campaigns", campaign, x_region="emea")
        appeared = _nightly(server, data)
        server.update("products", server.truth("products")[0]["id"], x_tier="gold")
        again = _nightly(server, data)

    assert _warnings(appeared, DRIFT) == {"campaigns": "new fields outside the spec: x_region (2 rows)"}
    assert _warnings(again, DRIFT) == {"products": "new fields outside the spec: x_tier (1 rows)"}
    assert _loads(data, appeared.run_id, "extra_fields, new_fields")["campaigns"] == ({"x_region": 2}, {"x_region": 2})
    assert _loads(data, again.run_id, "extra_fields, new_fields") == {
        "campaigns": ({"x_region": 2}, {}), "kols": ({}, {}), "products": ({"x_tier": 1}, {"x_tier": 1}),
        "signals": ({}, {})}
    assert [row[0] for row in _runs(data, "new_fields")] == [0, 1, 1]


def test_a_failed_run_the_daemon_launched_is_recorded_once_by_its_sensor(tmp_path):
    data = tmp_path / "data"
    instance = dg.DagsterInstance.ephemeral()
    with SpecServer(kols=3, campaigns=1, products=1, signals=1) as server:
        failed = _nightly(SimpleNamespace(base_url=server.base_url, api_key="spec_revoked"), data, instance, lands=False)
    run = instance.get_run_by_id(failed.run_id)
    (failure,) = instance.all_logs(failed.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    warehouse = WarehouseResource(data_dir=str(data))
    for _ in range(2):  # a second tick, or commops sync having recorded it first: one row still
        with dg.build_run_status_sensor_context(
                sensor_name=sync_health_failure_sensor.name, dagster_instance=instance, dagster_run=run,
                dagster_event=failure.dagster_event, resources={"warehouse": warehouse}).for_run_failure() as context:
            sync_health_failure_sensor(context)

    (row,) = query(data / "warehouse.duckdb", "SELECT run_id, org, outcome, tables_landed, failed_steps FROM sync_runs")
    assert row == (failed.run_id, "default", "failed", 0, ", ".join(f"lake__{table}" for table in sorted(TABLES)))
    assert query(data / "warehouse.duckdb", "SELECT count(*) FROM table_loads WHERE outcome = 'failed'") == [(4,)]
