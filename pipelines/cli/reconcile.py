"""`run_reconciliation`: the crm_reconciliation job executed in-process, summarised.

Used by `commops reconcile` and `commops demo`. Reads the KOLs the last sync left in the
warehouse and the CRM configured by SALESFORCE_* or COMMOPS_CRM_CSV; failures become one line
(`ReconcileError`), a missing or invalid setting a `SettingsError` naming its variable.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import ValidationError

from assets.crm.assets import RECONCILIATION_KEY, WRITEBACK_KEY, WRITEBACK_OP
from assets.crm.tables import STATUSES
from pipelines.cli.dagster_home import dagster_instance
from pipelines.definitions import build_resources, make_definitions
from pipelines.jobs import CRM_RECONCILIATION
from pipelines.cli.in_process import QUIET_CONSOLE, failure_message, metadata_value
from resources.crm import NOT_CONFIGURED, CrmSettings, build_crm_resource
from resources.settings import load_settings


class ReconcileError(RuntimeError):
    """The reconciliation failed; the message is one line saying why."""


@dataclass
class ReconciliationSummary:
    run_id: str
    source: str
    kols: int
    contacts: int
    counts: dict[str, int]
    report_html: Path
    report_csv: Path
    writeback: dict[str, Any] = field(default_factory=dict)
    duration_seconds: float = 0.0


def run_reconciliation(
    data_dir: str | os.PathLike[str] | None = None,
    apply: bool = False,
    instance: dg.DagsterInstance | None = None,
) -> ReconciliationSummary:
    """Extract the CRM's contacts, reconcile them with the warehouse's KOLs, write the reports and
    plan the write-back (`apply=True` also performs it). The CRM comes from the environment."""
    settings = load_settings(data_dir=data_dir)
    try:
        crm = build_crm_resource(CrmSettings())
    except ValidationError as error:
        problem = error.errors()[0]
        name = str(problem["loc"][0]).upper()
        raise ReconcileError(f"{name}={os.environ.get(name)!r}: {problem['msg']}") from None
    if crm is None:
        raise ReconcileError(NOT_CONFIGURED)
    resources = build_resources(settings, crm=crm)
    job = make_definitions(settings, resources).resolve_job_def(CRM_RECONCILIATION)
    started = datetime.now()
    with dagster_instance(settings) if instance is None else nullcontext(instance) as instance:
        result = job.execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={**QUIET_CONSOLE, "ops": {WRITEBACK_OP: {"config": {"apply": apply}}}},
        )
    if not result.success:
        raise ReconcileError(failure_message(result))
    summary = _summarise(result)
    summary.duration_seconds = round((datetime.now() - started).total_seconds(), 2)
    return summary


def _summarise(result: dg.ExecuteInProcessResult) -> ReconciliationSummary:
    metadata: dict[dg.AssetKey, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.materialization
        entries = dict(materialization.metadata)
        metadata[materialization.asset_key] = {key: metadata_value(entries, key) for key in entries}
    recon = metadata[RECONCILIATION_KEY]
    writeback = metadata.get(WRITEBACK_KEY, {})
    return ReconciliationSummary(
        run_id=result.run_id,
        source=str(recon.get("source", "")),
        kols=int(recon.get("kols", 0)),
        contacts=int(recon.get("contacts", 0)),
        counts={status: int(recon.get(status, 0)) for status in STATUSES},
        report_html=Path(recon["report_html"]),
        report_csv=Path(recon["report_csv"]),
        writeback=writeback,
    )

