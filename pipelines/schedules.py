"""The nightly schedule: `nightly_sync` at 02:00 in COMMOPS_TIMEZONE (default UTC).

default_status RUNNING: the point of the project is that the sync happens every night as
soon as `dagster dev` (or a deployed daemon) runs; an operator who does not want it stops it
in the UI. A run's snapshot date is the date it was created (assets/snapshot_date.py), so
the 02:00 tick files its data under the tick's own date, as `commops sync` does.
"""

from __future__ import annotations

import dagster as dg

from pipelines.jobs import crm_reconciliation, nightly_sync


def build_schedules(timezone: str, crm_configured: bool = False) -> list[dg.ScheduleDefinition]:
    """The CRM reconciliation runs at 04:00, after the nightly sync, so CRM admins find the report in
    the morning; it starts RUNNING only where a CRM is configured (elsewhere every tick would fail)."""
    return [
        dg.ScheduleDefinition(
            name="nightly_sync_schedule",
            job=nightly_sync,
            cron_schedule="0 2 * * *",
            execution_timezone=timezone,
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description="Runs the full sync every night at 02:00 (COMMOPS_TIMEZONE).",
        ),
        dg.ScheduleDefinition(
            name="crm_reconciliation_schedule",
            job=crm_reconciliation,
            cron_schedule="0 4 * * *",
            execution_timezone=timezone,
            default_status=dg.DefaultScheduleStatus.RUNNING if crm_configured else dg.DefaultScheduleStatus.STOPPED,
            description="Reconciles the KOLs with the CRM every morning at 04:00 (COMMOPS_TIMEZONE), a dry run.",
        ),
    ]
