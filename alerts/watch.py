"""What the alerts judge, the same from the daemon's sensors and from the commands under cron:

- `review_run`: a finished run: a failure opens `run/<job>/<org>`, the next success resolves it; a blocking
  (ERROR) check that failed opens `check/<asset:check>/<org>`, the next pass resolves it (a run failed by
  its blocking checks alone opens only theirs);
- `review_inbox`: per organization, quarantined events (`quarantined/<org>`), an event pending longer
  than COMMOPS_ALERT_BACKLOG_MINUTES (`backlog/<org>`), each resolved when it is gone, and a receiver that
  looks dead (`receiver/<org>`, alerts/receiver.py), resolved when events arrive again;
- `review_freshness`: per organization and warehouse table, a missed deadline (`stale/<org>/<table>`,
  alerts/freshness.py), resolved when the table is loaded again.
"""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from alerts.alerter import Alerter
from alerts.freshness import judge
from alerts.receiver import review_receiver
from alerts.runs import EVERY_ORG, check_evaluations, failed_by_checks_alone, failure_cause, run_org
from commops_spec.timestamps import parse_timestamp
from resources.orgs import Org
from resources.inbox import Inbox

FOLLOWER_INCIDENT = "follower"
UNKNOWN_ORG = "unknown"  # events whose organization_id no registered organization has


def review_run(instance: dg.DagsterInstance, run: dg.DagsterRun, alerter: Alerter) -> None:
    """A run failed only by its blocking checks is one incident per failed check, the check's: its alert
    says the job failed, and the run's own incident is not opened (it would tell the same cause twice)."""
    org, job = run_org(run), run.job_name
    blocked = []
    for evaluation in check_evaluations(instance, run.run_id):
        check = f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"
        if evaluation.passed:
            alerter.recover(f"check/{check}/{org}", org, f"check {check}", "passed", run.run_id)
        elif evaluation.blocking and evaluation.severity == dg.AssetCheckSeverity.ERROR:
            blocked.append((check, evaluation))
    if run.status == dg.DagsterRunStatus.FAILURE and not (blocked and failed_by_checks_alone(instance, run.run_id)):
        alerter.alert(f"run/{job}/{org}", "run_failed", org, f"job {job}", failure_cause(instance, run.run_id),
                      run.run_id)
    elif run.status == dg.DagsterRunStatus.SUCCESS:
        alerter.recover(f"run/{job}/{org}", org, f"job {job}", f"run {run.run_id[:8]} succeeded", run.run_id)
    for check, evaluation in blocked:
        alerter.alert(f"check/{check}/{org}", "check_failed", org, f"check {check}",
                      f"{evaluation.description or 'failed'} (blocking): {evaluation.asset_key.to_user_string()} "
                      f"and what depends on it were not loaded; job {job} failed", run.run_id)


def review_follower(alerter: Alerter, follower: str, *, alive: bool, runs_failed: int = 0) -> None:
    """The events follower (`commops events follow`): an incident from the sensor's tick that finds it stopped,
    resolved when a follower beats again."""
    if alive:
        alerter.recover(FOLLOWER_INCIDENT, EVERY_ORG, "events follower", f"{follower} applies webhook events again")
        return
    alerter.alert(FOLLOWER_INCIDENT, "follower_stopped", EVERY_ORG, "events follower",
                  f"{follower} stopped beating: webhook_events_sensor applies the events now, each change in about a "
                  "minute instead of seconds; start commops events follow again"
                  + (f"; {runs_failed} run(s) it left unfinished marked failed" if runs_failed else ""))


def review_inbox(inbox: Inbox, orgs: list[Org], alerter: Alerter, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    backlog_minutes = alerter.settings.backlog_minutes
    figures: dict[str, list] = {}
    for organization_id, pending, oldest, quarantined, newest in inbox.by_organization():
        org = org_name(organization_id, orgs)
        seen = figures.setdefault(org, [0, None, 0, None])
        seen[0] += pending
        seen[1] = min(filter(None, [seen[1], oldest]), default=None)
        seen[2] += quarantined
        seen[3] = max(filter(None, [seen[3], newest]), default=None)
    for org in sorted({*figures, *(o.name for o in orgs)}):
        pending, oldest, quarantined, _newest = figures.get(org, [0, None, 0, None])
        if quarantined:
            alerter.alert(f"quarantined/{org}", "quarantined", org, "inbox",
                          f"{quarantined} webhook event(s) quarantined after failing: commops events status names "
                          "them, commops events retry puts them back")
        else:
            alerter.recover(f"quarantined/{org}", org, "inbox", "no quarantined event left")
        age = (now - parse_timestamp(oldest)).total_seconds() / 60 if oldest else 0.0
        if age > backlog_minutes:
            alerter.alert(f"backlog/{org}", "backlog", org, "inbox",
                          f"{pending} webhook event(s) pending, the oldest for {age:.0f} min "
                          f"(COMMOPS_ALERT_BACKLOG_MINUTES={backlog_minutes:g}): is webhook_events_sensor running? "
                          "commops events apply applies them now")
        else:
            alerter.recover(f"backlog/{org}", org, "inbox", "no event pending too long")
    for org in orgs:
        newest = figures.get(org.name, [None] * 4)[3]
        review_receiver(org, parse_timestamp(newest) if newest else None, alerter, now)


def org_name(organization_id: str | None, orgs: list[Org]) -> str:
    """The registered organization an inbox event belongs to (webhooks/organizations.py's rule)."""
    for org in orgs:
        if org.organization_id and org.organization_id == organization_id:
            return org.name
    if len(orgs) == 1 and not orgs[0].organization_id:
        return orgs[0].name
    return UNKNOWN_ORG


def review_freshness(instance: dg.DagsterInstance, orgs: list[Org], tables: list[str], timezone: str,
                     alerter: Alerter, now: datetime | None = None) -> None:
    for org in orgs:
        for freshness in judge(instance, org.name, tables, timezone, now):
            key = f"stale/{org.name}/{freshness.table}"
            if freshness.stale:
                alerter.alert(key, "stale", org.name, f"table {freshness.table}", freshness.describe())
            elif freshness.as_of is not None:
                alerter.recover(key, org.name, f"table {freshness.table}", freshness.describe())
