"""`run_reconciliation`: the crm_reconciliation job executed in-process, summarised.

Used by `commops reconcile` and `commops demo`. Reads the KOLs the last sync left in the
warehouse and the CRM configured by SALESFORCE_* or COMMOPS_CRM_CSV; failures become one line
(`ReconcileError`), a missing or invalid setting a `SettingsError` naming its variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import dagster as dg

from crm.tables import DEFAULT_ORG
from assets.crm import RECONCILIATION_KEY, WRITEBACK_KEY, WRITEBACK_OP
from crm.reconcile import ReconciliationResult
from crm.writeback import WritebackOutcome
from pipelines.definitions import build_resources
from pipelines.jobs import CRM_RECONCILIATION
from commops_cli.crm_admin import ReconcileError, crm_resource
from commops_cli.in_process import job_runner
from resources.metadata_record import unreported
from resources.settings import load_settings


@dataclass
class Reconciliation(ReconciliationResult):
    """A reconciliation run's result, and the write-back planned (or applied) after it."""

    writeback: WritebackOutcome | None = unreported(default=None)


def run_reconciliation(
    data_dir: str | os.PathLike[str] | None = None,
    apply: bool = False,
    instance: dg.DagsterInstance | None = None,
    org: str = DEFAULT_ORG,
    user: str | None = None,
) -> Reconciliation:
    """Extract the CRM's contacts, reconcile them with organization `org`'s KOLs, write the reports and
    plan the write-back (`apply=True` also performs it, less the changes an admin excluded, audited as
    `user`). The CRM comes from the environment."""
    settings = load_settings(data_dir=data_dir)
    resources = build_resources(settings, crm=crm_resource())
    with job_runner(settings, resources, instance, marts=False) as runner:
        run = runner.run(CRM_RECONCILIATION, run_config={"ops": {WRITEBACK_OP: {"config": {"apply": apply, "user": user}}}},
                         partition=org)
    if not run.success:
        raise ReconcileError(run.failure)
    return run.output(RECONCILIATION_KEY, Reconciliation, run_id=run.run_id,
                      writeback=run.output(WRITEBACK_KEY, WritebackOutcome))
