"""`commops status`: one screen per organization: the last run of each job, each table's freshness against
its deadline, failing checks, quarantined events and the inbox backlog; exit 1 when anything is red
(for cron and monitoring), `--json` for machines. Missed freshness deadlines alert from here under cron."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import click
from rich.console import Console
from rich.table import Table

from alerts.alerter import opened_alerter
from alerts.status import TABLES, OrgStatus, org_status
from alerts.watch import org_name, review_freshness
from commops_cli.command_checks import fail
from commops_cli.dagster_home import dagster_instance
from commops_spec.timestamps import parse_timestamp
from pipelines.jobs import JOBS
from resources.orgs import OrgRegistry
from resources.settings import SettingsError, load_settings
from resources.inbox import Inbox, InboxUnreachable, inbox_location


@click.command("status")
@click.option("--data-dir", help="The data directory (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--json", "as_json", is_flag=True, help="Print the same as JSON.")
def status(data_dir, as_json) -> None:
    """Each organization's state on one screen; exit 1 when anything is red."""
    try:
        settings = load_settings(data_dir=data_dir)
        orgs = OrgRegistry(settings.data_dir).all()
        location = inbox_location(settings.data_dir)
        with dagster_instance(settings) as instance:
            statuses = [org_status(instance, org.name, [job.name for job in JOBS], settings.timezone) for org in orgs]
            backlog = _inbox(location, orgs, statuses)
            try:
                with opened_alerter(location) as alerter:
                    review_freshness(instance, orgs, TABLES, settings.timezone, alerter)
                    alerter.deliver()
                    for each in statuses:
                        each.open_incidents = [a.incident for a in alerter.store.open_incidents(each.org)]
            except (SettingsError, InboxUnreachable) as error:
                click.echo(f"alerts not checked: {error}", err=True)
    except (SettingsError, InboxUnreachable) as error:
        fail("status", str(error))
    if not statuses:
        click.echo("commops status: no organization: commops orgs add NAME ..., or set COMMOPS_BASE_URL for the default one")
    for each in statuses:
        each.backlog_aged = backlog.get(each.org, False)
    if as_json:
        click.echo(json.dumps([s.as_json() for s in statuses], indent=2))
    else:
        console = Console(width=None if sys.stdout.isatty() else 160)
        for each in statuses:
            _print(each, console)
    sys.exit(1 if any(s.red for s in statuses) else 0)


def _inbox(location, orgs, statuses: list[OrgStatus]) -> dict[str, bool]:
    """Fill in each organization's inbox figures; {org: its oldest pending event is past the backlog limit}."""
    from alerts.settings import AlertSettings

    minutes = AlertSettings().backlog_minutes
    by_org = {s.org: s for s in statuses}
    aged: dict[str, bool] = {}
    now = datetime.now(UTC)
    with Inbox(location) as box:
        for organization_id, pending, oldest, quarantined, _newest in box.by_organization():
            each = by_org.get(org_name(organization_id, orgs))
            if each is None:
                continue
            each.pending += pending
            each.quarantined += quarantined
            if oldest and (each.oldest_pending is None or oldest < each.oldest_pending):
                each.oldest_pending = oldest
            if oldest and (now - parse_timestamp(oldest)).total_seconds() / 60 > minutes:
                aged[each.org] = True
    return aged


def _print(each: OrgStatus, console: Console) -> None:
    mark = "[bold red]RED[/]" if each.red else "[green]ok[/]"
    console.print(f"[bold]{each.org}[/]  {mark}")
    runs = Table(title="last run of each job", title_justify="left")
    for column in ("job", "outcome", "started", "seconds", "rows", "failure"):
        runs.add_column(column)
    for job in each.jobs:
        runs.add_row(job.job, job.status, job.started_at or "-", f"{job.seconds:g}" if job.seconds is not None else "-",
                     f"{job.rows:,}" if job.rows is not None else "-", job.failure or "")
    console.print(runs)
    tables = Table(title="freshness", title_justify="left")
    for column in ("table", "data as of", "due by", "state"):
        tables.add_column(column)
    for table in each.tables:
        tables.add_row(table["table"], table["as_of"] or "never", table["due_by"],
                       "[red]STALE[/]" if table["stale"] else table["state"])
    console.print(tables)
    checks = ", ".join(f"{c['check']} ({'blocking' if c['blocking'] else c['severity']})" for c in each.failing_checks)
    console.print(f"failing checks: {checks or 'none'}")
    inbox = f"{each.pending} pending" + (f", oldest received {each.oldest_pending}" if each.oldest_pending else "")
    console.print(f"webhook events: {inbox}; {each.quarantined} quarantined"
                  + (" [red](backlog past COMMOPS_ALERT_BACKLOG_MINUTES)[/]" if each.backlog_aged else ""))
    if each.open_incidents:
        console.print(f"open incidents: {', '.join(each.open_incidents)}")
    console.print()
