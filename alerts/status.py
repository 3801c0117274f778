"""One organization's state as `commops status` shows it: the last run of each job, each table's freshness,
the failing checks of its last nightly run, its webhook events (quarantined, backlog and oldest), its open
incidents; `red` when anything needs a person."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import dagster as dg

from alerts.freshness import Freshness, judge
from alerts.runs import PARTITION_TAG, check_evaluations, failure_cause
from sync.catalog import CATALOG

TABLES = [*(spec.table for spec in CATALOG), "kol_details"]
NIGHTLY_SYNC = "nightly_sync"


@dataclass
class JobState:
    job: str
    run_id: str | None = None
    status: str = "never run"
    started_at: str | None = None
    seconds: float | None = None
    rows: int | None = None  # rows of the warehouse tables the run loaded
    failure: str | None = None


@dataclass
class OrgStatus:
    org: str
    jobs: list[JobState] = field(default_factory=list)
    tables: list[dict] = field(default_factory=list)  # table, as_of, due_by, stale, state
    failing_checks: list[dict] = field(default_factory=list)  # check, severity, blocking
    quarantined: int = 0
    pending: int = 0
    oldest_pending: str | None = None
    backlog_aged: bool = False
    open_incidents: list[str] = field(default_factory=list)

    @property
    def red(self) -> bool:
        return bool(any(job.status == "FAILURE" for job in self.jobs) or any(t["stale"] for t in self.tables)
                    or any(c["blocking"] for c in self.failing_checks) or self.quarantined or self.backlog_aged)

    def as_json(self) -> dict:
        return {**asdict(self), "red": self.red}


def job_state(instance: dg.DagsterInstance, job: str, org: str) -> JobState:
    [record, *_] = instance.get_run_records(
        dg.RunsFilter(job_name=job, tags={PARTITION_TAG: org}), limit=1) or [None]
    if record is None:
        return JobState(job)
    run = record.dagster_run
    state = JobState(job, run.run_id, run.status.value)
    if record.start_time:
        state.started_at = datetime.fromtimestamp(record.start_time, UTC).isoformat(timespec="seconds")
        if record.end_time:
            state.seconds = round(record.end_time - record.start_time, 1)
    loads = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    rows = [record.asset_materialization.metadata.get("dagster/row_count") for record in loads
            if record.asset_materialization.asset_key.path[0] == "warehouse"]
    state.rows = sum(int(value.value) for value in rows if value is not None) if any(rows) else None
    if run.status == dg.DagsterRunStatus.FAILURE:
        state.failure = failure_cause(instance, run.run_id)
    return state


def org_status(instance: dg.DagsterInstance, org: str, jobs: list[str], timezone: str,
               now: datetime | None = None) -> OrgStatus:
    status = OrgStatus(org, jobs=[job_state(instance, job, org) for job in jobs])
    for freshness in judge(instance, org, TABLES, timezone, now):
        status.tables.append(_table(freshness))
    nightly = next((job for job in status.jobs if job.job == NIGHTLY_SYNC and job.run_id), None)
    if nightly is not None:
        status.failing_checks = [
            {"check": f"{e.asset_key.to_user_string()}:{e.check_name}", "severity": e.severity.value,
             "blocking": bool(e.blocking) and e.severity == dg.AssetCheckSeverity.ERROR}
            for e in check_evaluations(instance, nightly.run_id) if not e.passed]
    return status


def _table(freshness: Freshness) -> dict:
    return {"table": freshness.table, "as_of": freshness.as_of.isoformat(timespec="seconds") if freshness.as_of else None,
            "due_by": freshness.deadline.isoformat(timespec="seconds"), "stale": freshness.stale,
            "state": freshness.describe()}
