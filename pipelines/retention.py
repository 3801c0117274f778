"""The `retention` job and its daily schedule: what COMMOPS_RETENTION_DAYS says may no longer be kept is
removed (privacy/retention.py); the run's output metadata says what went. Unset, the run removes nothing
and says so."""

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import dagster as dg

from privacy.retention import RetentionSettingError, apply_retention
from resources.settings import SettingsError, load_settings
from resources.warehouse import WarehouseResource

RETENTION = "retention"


@dg.op(description="Remove lake snapshots (local and on S3), Iceberg snapshots, applied inbox events, reports and "
                   "reconciliation history older than COMMOPS_RETENTION_DAYS (never below the undo window and the "
                   "nights the history compares).")
def apply_retention_op(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> dg.Output[int]:
    today = datetime.now(ZoneInfo(load_settings().timezone)).date()
    try:
        removed = apply_retention(Path(warehouse.data_dir), today, log=context.log)
    except (RetentionSettingError, SettingsError) as error:  # one line naming the setting
        raise dg.Failure(str(error)) from None
    if removed.days is None:
        context.log.info("retention: COMMOPS_RETENTION_DAYS is unset, everything is kept")
    else:
        context.log.info(f"retention ({removed.days} days, cutoff {removed.cutoff}): {len(removed.snapshots)} snapshot(s), "
                         f"{removed.inbox_events} inbox event(s), {len(removed.reports)} report(s), "
                         f"{removed.reconciliation_runs} reconciliation run(s) removed, "
                         f"{removed.iceberg_snapshots} Iceberg snapshot(s) expired")
    total = (len(removed.snapshots) + removed.inbox_events + len(removed.reports) + removed.reconciliation_runs
             + removed.iceberg_snapshots)
    return dg.Output(total, metadata=removed.as_metadata())


@dg.job(name=RETENTION, executor_def=dg.in_process_executor,
        description="Storage limitation: remove what is older than COMMOPS_RETENTION_DAYS (unset: keep everything).")
def retention_job() -> None:
    apply_retention_op()


def retention_schedule(timezone: str) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name="retention_schedule",
        job=retention_job,
        cron_schedule="30 5 * * *",
        execution_timezone=timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Applies COMMOPS_RETENTION_DAYS every morning at 05:30 (COMMOPS_TIMEZONE), after the nightly "
                    "sync and the reconciliation; removes nothing while it is unset.",
    )
