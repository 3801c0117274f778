"""A nightly run's health rows (`sync_runs`, `table_loads`: resources/sync_health.py), read from what the run
recorded in the Dagster instance: its steps' materialization metadata (the lake assets' requests, 429s,
throttling, rows in flux and unreadable values; the warehouse assets' merge counts and fields outside the
spec), its check evaluations and failed steps.

Recorded once per run: a run that lands by its `analytics` step, just before the publish (so the published
copy holds its own row); a run that fails where it ended (`commops sync` after the run, the daemon's
`sync_health_failure_sensor` otherwise), its rows published on their own (docs/spec-decisions.md#sync-health).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dagster as dg

from assets.snapshot_date import run_snapshot_date
from resources import sync_health
from resources.commops_api import RequestStats
from resources.metadata_record import ROW_COUNT, plain_values
from resources.warehouse import WarehouseResource
from sync.catalog import CATALOG

NIGHTLY_SYNC = "nightly_sync"  # the job whose runs are recorded (pipelines/jobs.py)
PARTITION_TAG = "dagster/partition"


def _step(layer: str, name: str) -> str:
    return f"{layer}__{name}"


def _materializations(instance: dg.DagsterInstance, run_id: str) -> dict[str, dict[str, Any]]:
    """Each asset's last materialization metadata in the run, by its key's user string (`lake/kols`)."""
    found: dict[str, dict[str, Any]] = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = record.dagster_event.event_specific_data.materialization
        found[materialization.asset_key.to_user_string()] = plain_values(materialization.metadata)
    return found


def _failed_checks(instance: dg.DagsterInstance, run_id: str) -> tuple[list[str], list[str]]:
    """The run's failed checks as asset:check: the blocking ones (ERROR), the warnings."""
    blocking, warned = [], []
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = record.dagster_event.event_specific_data
        if evaluation.passed:
            continue
        name = f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"
        is_blocking = bool(evaluation.blocking) and evaluation.severity == dg.AssetCheckSeverity.ERROR
        (blocking if is_blocking else warned).append(name)
    return blocking, warned


def _timestamp(value: float | datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.astimezone(UTC) if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)


def _table_load(name: str, table: str, lake: dict[str, Any] | None, loaded: dict[str, Any] | None,
                failed_steps: set[str], blocking: list[str]) -> dict[str, Any]:
    lake, loaded = lake or {}, loaded or {}
    if loaded:
        outcome = sync_health.LANDED
    elif any(check.startswith(f"lake/{name}:") for check in blocking):
        outcome = sync_health.BLOCKED
    elif {_step("lake", name), _step("warehouse", name)} & failed_steps:
        outcome = sync_health.FAILED
    else:
        outcome = sync_health.SKIPPED
    spent = RequestStats.from_metadata(lake) if lake else None
    durations = [m["duration_seconds"] for m in (lake, loaded) if m.get("duration_seconds") is not None]
    unreadable = lake.get("unreadable_values")
    return {
        "table_name": table,
        "as_of": datetime.fromisoformat(lake["listing_started_at"]) if lake.get("listing_started_at") else None,
        "outcome": outcome,
        "rows_snapshot": loaded.get("rows_snapshot", lake.get(ROW_COUNT)),
        "rows_total": loaded.get(ROW_COUNT),
        **{key: loaded.get(key) for key in ("rows_inserted", "rows_updated", "rows_unchanged", "rows_archived")},
        "requests": None if spent is None else spent.requests,
        "responses_429": None if spent is None else spent.rate_limited,
        "retries": None if spent is None else spent.retries,
        "throttled_seconds": None if spent is None else spent.throttled_seconds,
        "rows_in_flux": lake.get("rows_in_flux"),
        "unreadable_values": sum(unreadable.values()) if isinstance(unreadable, dict) else None,
        "extra_fields": loaded.get("extra_fields"),
        "new_fields": loaded.get("new_fields"),
        "duration_seconds": round(sum(durations), 3) if durations else None,
    }


def run_health(instance: dg.DagsterInstance, run: dg.DagsterRun, *, landed: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's `sync_runs` row and its `table_loads` rows (one per catalog table the run selected).
    `landed`: the run is at its publish, every step before it done."""
    record = instance.get_run_record_by_id(run.run_id)
    materialized = _materializations(instance, run.run_id)
    blocking, warned = _failed_checks(instance, run.run_id)
    failed_steps = {r.step_key for r in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)}
    common = {"run_id": run.run_id, "org": run.tags.get(PARTITION_TAG),
              "snapshot_date": run_snapshot_date(instance, run.run_id)}
    selected = run.asset_selection
    loads = [
        common | _table_load(spec.name, spec.table, materialized.get(f"lake/{spec.name}"),
                             materialized.get(f"warehouse/{spec.name}"), failed_steps, blocking)
        for spec in CATALOG
        if not selected or dg.AssetKey(["lake", spec.name]) in selected or dg.AssetKey(["warehouse", spec.name]) in selected
    ]
    started = _timestamp(record.start_time if record is not None and record.start_time else
                         (record.create_timestamp if record is not None else None))
    ended = datetime.now(UTC) if landed else _timestamp(record.end_time if record is not None else None)
    ended = ended or datetime.now(UTC)
    spent = [s for s in (RequestStats.from_metadata(m) for m in materialized.values()) if s is not None]

    def summed(key: str) -> int:
        return sum(load[key] or 0 for load in loads)

    outcome = sync_health.LANDED if landed else (sync_health.BLOCKED if blocking else sync_health.FAILED)
    stopped_by_checks = {check.split(":")[0].replace("/", "__") for check in blocking}  # their steps fail too
    failures = sorted(failed_steps - stopped_by_checks) + blocking
    row = common | {
        "started_at": started,
        "ended_at": ended,
        "duration_seconds": round((ended - started).total_seconds(), 3) if started else None,
        "outcome": outcome,
        "failed_steps": ", ".join(failures) or None,
        "warned_checks": ", ".join(warned) or None,
        "tables_landed": sum(load["outcome"] == sync_health.LANDED for load in loads),
        "requests": sum(s.requests for s in spent),
        "responses_429": sum(s.rate_limited for s in spent),
        "retries": sum(s.retries for s in spent),
        "throttled_seconds": round(sum(s.throttled_seconds for s in spent), 3),
        **{key: summed(key) for key in ("rows_inserted", "rows_updated", "rows_unchanged", "rows_archived",
                                        "rows_in_flux", "unreadable_values")},
        "new_fields": sum(len(load["new_fields"] or {}) for load in loads),
        "recorded_at": datetime.now(UTC),
    }
    return row, loads


def record_sync_health(instance: dg.DagsterInstance, run_id: str, warehouse: WarehouseResource, log: Any = None,
                       *, landed: bool = False, publish: bool = False) -> bool:
    """Append run `run_id`'s health rows to the warehouse (a nightly run not yet recorded; False otherwise);
    `publish`: also into analytics.duckdb as it stands (a failed run, which publishes nothing else)."""
    run = instance.get_run_by_id(run_id)
    if run is None or run.job_name != NIGHTLY_SYNC:
        return False
    row, loads = run_health(instance, run, landed=landed)
    with warehouse.writer(log) as session:
        appended = sync_health.append_run(session.conn, row, loads)
    if appended and publish:
        sync_health.publish_health(warehouse, log)
    return appended
