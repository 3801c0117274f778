"""The nightly job of the KOLs' snapshot and its checks only, run in process: a real run (failed or landed)
for the alerts to review, in seconds rather than a whole sync's minute."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipelines.definitions import build_resources, make_definitions
from resources.settings import load_settings
from tests.pipeline.sync_support import api_key_in_env, with_orgs


def nightly_of_lake_kols(instance: dg.DagsterInstance, base_url: str, api_key: str, data_dir: Path) -> dg.DagsterRun:
    settings = load_settings(base_url=base_url, data_dir=data_dir)
    job = make_definitions(settings, build_resources(settings)).resolve_job_def("nightly_sync")
    with api_key_in_env(api_key):
        result = job.execute_in_process(instance=with_orgs(instance), partition_key="default", raise_on_error=False,
                                        asset_selection=[dg.AssetKey(["lake", "kols"])])
    return result.dagster_run


def status_sensor_context(sensor: str, instance: dg.DagsterInstance, run: dg.DagsterRun, resources: dict):
    """What the daemon gives a run status sensor for the finished `run` (a failure sensor's, if it failed)."""
    failed = run.status == dg.DagsterRunStatus.FAILURE
    kind = dg.DagsterEventType.RUN_FAILURE if failed else dg.DagsterEventType.RUN_SUCCESS
    event = instance.all_logs(run.run_id, of_type=kind)[0].dagster_event
    context = dg.build_run_status_sensor_context(sensor, event, instance, run, resources=resources)
    return context.for_run_failure() if failed else context
