"""`sync_health_failure_sensor`: a failed nightly run launched by the daemon (the schedule, the UI) gets its
`sync_runs` and `table_loads` rows, as `commops sync` gives them to the runs it runs itself. A run whose
process died is seen too, once run monitoring marks it failed. A run already recorded is left as it is."""

from __future__ import annotations

import dagster as dg

from assets.sync_health import record_sync_health
from pipelines.jobs import nightly_sync
from resources.warehouse import WarehouseResource


@dg.run_failure_sensor(
    name="sync_health_failure_sensor",
    monitored_jobs=[nightly_sync],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Records a failed nightly run in sync_runs and table_loads (warehouse and analytics.duckdb).",
)
def sync_health_failure_sensor(context: dg.RunFailureSensorContext, warehouse: WarehouseResource) -> None:
    if record_sync_health(context.instance, context.dagster_run.run_id, warehouse, context.log, publish=True):
        context.log.info(f"sync health recorded for failed run {context.dagster_run.run_id[:8]}")
