"""The schedules. The nightly one: `nightly_sync` at 02:00 in COMMOPS_TIMEZONE (default UTC), one run per
organization (each a partition of `orgs`; the run queue lets each organization run one run at a time
and several organizations in parallel).

default_status RUNNING: the point of the project is that the sync happens every night as
soon as `dagster dev` (or a deployed daemon) runs; an operator who does not want it stops it
in the UI. A run's snapshot date is the date it was created (assets/snapshot_date.py), so
the 02:00 tick files its data under the tick's own date, as `commops sync` does. The CRM one:
`crm_reconciliation` at 04:00, one run per organization too.
"""

from __future__ import annotations

import dagster as dg

from assets.partitions import ORGS
from pipelines.jobs import crm_reconciliation, nightly_sync


def _nightly_per_org(timezone: str) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="nightly_sync_schedule",
        job=nightly_sync,
        cron_schedule="0 2 * * *",
        execution_timezone=timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Runs the full sync of every organization every night at 02:00 (COMMOPS_TIMEZONE).",
    )
    def nightly_sync_schedule(context: dg.ScheduleEvaluationContext):
        return _one_run_per_org(context, "nightly")

    return nightly_sync_schedule


def _crm_per_org(timezone: str, crm_configured: bool) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="crm_reconciliation_schedule",
        job=crm_reconciliation,
        cron_schedule="0 4 * * *",
        execution_timezone=timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING if crm_configured else dg.DefaultScheduleStatus.STOPPED,
        description="Reconciles each organization's KOLs with the CRM every morning at 04:00 (COMMOPS_TIMEZONE), "
        "a dry run.",
    )
    def crm_reconciliation_schedule(context: dg.ScheduleEvaluationContext):
        return _one_run_per_org(context, "crm")

    return crm_reconciliation_schedule


def _one_run_per_org(context: dg.ScheduleEvaluationContext, run_key_prefix: str):
    """A run per registered organization (its partition), keyed by the tick's date so a tick runs each once."""
    tick = context.scheduled_execution_time.strftime("%Y-%m-%d")
    orgs = context.instance.get_dynamic_partitions(ORGS.name)
    if not orgs:
        return dg.SkipReason("no organization is registered (commops orgs add, or COMMOPS_BASE_URL)")
    return [dg.RunRequest(run_key=f"{run_key_prefix}-{org}-{tick}", partition_key=org) for org in orgs]


def build_schedules(timezone: str, crm_configured: bool = False) -> list[dg.ScheduleDefinition]:
    """The CRM reconciliation runs at 04:00, after the nightly sync, so CRM admins find the report in
    the morning; it starts RUNNING only where a CRM is configured (elsewhere every tick would fail)."""
    return [
        _nightly_per_org(timezone),
        _crm_per_org(timezone, crm_configured),
    ]
