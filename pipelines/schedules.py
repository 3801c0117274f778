"""The nightly schedule: `nightly_sync` at 02:00 in COMMOPS_TIMEZONE (default UTC).

default_status RUNNING: the point of the project is that the sync happens every night as
soon as `dagster dev` (or a deployed daemon) runs; an operator who does not want it stops it
in the UI. Each tick materializes the partition of the tick's own date (the date the data
was read), the same partition `commops sync` without --date uses.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

import dagster as dg

from pipelines.jobs import nightly_sync
from resources import settings

TIMEZONE = settings.timezone()


@dg.schedule(
    name="nightly_sync_schedule",
    job=nightly_sync,
    cron_schedule="0 2 * * *",
    execution_timezone=TIMEZONE,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Runs the full sync every night at 02:00 (COMMOPS_TIMEZONE).",
)
def nightly_sync_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    snapshot_date = context.scheduled_execution_time.astimezone(ZoneInfo(TIMEZONE)).strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"nightly-{snapshot_date}", partition_key=snapshot_date)


SCHEDULES = [nightly_sync_schedule]
