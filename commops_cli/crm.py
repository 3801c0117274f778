"""`commops reconcile` (KOLs against the CRM, reports, optional write-back) and `commops crm sandbox`
(a local Salesforce stand-in seeded from the local service's KOLs)."""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from commops_cli.command_checks import fail, require_free_port, writable_data_dir
from commops_cli.crm_admin import ReconcileError, crm_resource, run_review, warehouse_for
from crm import actions
from crm.tables import DEFAULT_ORG
from crm.writeback import os_user
from resources.crm.errors import CrmError
from resources.settings import SettingsError

if TYPE_CHECKING:
    from commops_cli.crm_run import Reconciliation


def print_reconciliation(summary: Reconciliation, console: Console) -> None:
    console.print(f"commops reconcile: {summary.kols:,} KOLs against {summary.contacts:,} contacts from {summary.source}",
                  soft_wrap=True)
    table = Table()
    table.add_column("status")
    table.add_column("rows", justify="right")
    for status, count in summary.counts.items():
        if count or status in ("matched", "conflict", "missing_in_crm", "crm_only"):
            table.add_row(status, f"{count:,}")
    console.print(table)
    planned = summary.writeback
    if planned is not None:
        if planned.applied:
            mode = "applied"
        elif planned.writable:
            mode = "dry run (commops reconcile --apply writes them)"
        else:
            mode = "dry run (the CRM is a CSV export: nothing can be written back)"
        console.print(
            f"Write-back, {mode}: {planned.creates:,} contacts to create, "
            f"{planned.updates:,} to update ({planned.fields:,} field values in all); failed {planned.failed:,}",
            soft_wrap=True,
        )
    if summary.needs_review:
        console.print(f"Needs review: {summary.needs_review:,} KOLs probably have a contact under another email; none is "
                      "created for them. See the report's probable_match section, then "
                      "`commops reconcile confirm KOL CONTACT` or `commops reconcile reject KOL CONTACT`.", soft_wrap=True)
    if summary.duplicate_sets:
        console.print(f"Duplicate sets in the CRM: {summary.duplicate_sets:,} (merge file beside the report, "
                      "latest-merge.csv; nothing is merged for you)", soft_wrap=True)
    console.print(f"Report:  {summary.report_html}", soft_wrap=True)
    console.print(f"CSV:     {summary.report_csv}", soft_wrap=True)
    console.print("Tables:  kol_crm_reconciliation, reconciliation_runs, crm_writeback_audit in analytics.duckdb")


def reconcile_and_report(command: str, **kwargs) -> Reconciliation:
    """Run the reconciliation and print its summary; on failure one line and exit 1."""
    try:
        from commops_cli.crm_run import run_reconciliation  # Dagster: only the commands that run the job

        summary = run_reconciliation(**kwargs)
    except (SettingsError, ReconcileError, CrmError) as error:
        fail(command, str(error))
    print_reconciliation(summary, Console(width=None if sys.stdout.isatty() else 160))
    return summary


ORG_HELP = "Organization whose KOLs are reconciled (an `orgs` partition; default: default)."


@click.group("reconcile", invoke_without_command=True)
@click.option("--data-dir", help="Where the warehouse and reports are (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--org", default=DEFAULT_ORG, show_default=True, help=ORG_HELP)
@click.option("--apply", is_flag=True,
              help="Write the fixes to the CRM: create missing contacts and update the fields whose policy says the KOL "
                   "record wins (never deletes, never creates a KOL that has a probable match). Default: a dry run that "
                   "only lists them.")
@click.pass_context
def reconcile(ctx: click.Context, data_dir: str | None, org: str, apply: bool) -> None:
    """Reconcile the warehouse's KOLs against the CRM's contacts (by email, then probable matches); write the
    reports. `confirm` / `reject` answer a probable match, `decisions` takes a filled-in CSV, `apply-approved`
    writes the approved changes, `undo` reverts one."""
    if ctx.invoked_subcommand is not None:
        if apply:
            fail("reconcile", f"--apply goes without a subcommand (it is not an option of {ctx.invoked_subcommand})")
        ctx.obj = {"data_dir": data_dir, "org": org}
        return
    data = writable_data_dir("reconcile", data_dir)
    reconcile_and_report("reconcile", data_dir=data, apply=apply, org=org, user=os_user())


def _org(ctx: click.Context) -> str:
    return (ctx.obj or {}).get("org") or DEFAULT_ORG


def _review(ctx: click.Context, action: str, kol_id: str, contact_id: str, data_dir: str | None) -> None:
    command = f"reconcile {action}"
    data = writable_data_dir(command, data_dir or (ctx.obj or {}).get("data_dir"))
    try:
        outcome = run_review(action, kol_id, contact_id, data_dir=data, org=_org(ctx), user=os_user())
    except (SettingsError, ReconcileError, CrmError) as error:
        fail(command, str(error))
    if outcome.error:
        fail(command, f"Salesforce refused to update contact {contact_id}: {outcome.error} (audited in crm_writeback_audit)")
    if action == "confirm":
        click.echo(f"Confirmed: contact {contact_id} now carries {kol_id} as its external id; the next `commops reconcile` "
                   "pairs them." if outcome.done else f"Nothing to do: contact {contact_id} already carries {kol_id}.")
    else:
        click.echo(f"Rejected: {kol_id} and {contact_id} will not be proposed again (kept in "
                   f"{data / 'crm' / 'rejected-pairs.csv'})." if outcome.done else
                   f"Nothing to do: {kol_id} and {contact_id} were rejected before.")


def _review_command(action: str, help_text: str) -> None:
    @reconcile.command(action, help=help_text)
    @click.argument("kol_id")
    @click.argument("contact_id")
    @click.option("--data-dir", help="Where the warehouse is (default: $COMMOPS_DATA_DIR or ./data).")
    @click.pass_context
    def command(ctx: click.Context, kol_id: str, contact_id: str, data_dir: str | None) -> None:
        _review(ctx, action, kol_id, contact_id, data_dir)


_review_command("confirm", "A probable match is one person: write KOL_ID to the contact's external-id field in "
                           "Salesforce (audited).")
_review_command("reject", "A probable match is two people: never propose the pair again (kept in the data directory, "
                          "audited).")


def _act(ctx: click.Context, command: str, data_dir: str | None, act) -> object:
    """Run an admin action on the data directory's warehouse; a refusal or failure is one line and exit 1."""
    data = writable_data_dir(command, data_dir or (ctx.obj or {}).get("data_dir"))
    try:
        return act(warehouse_for(data))
    except (SettingsError, ReconcileError, CrmError, actions.ActionRefused) as error:
        fail(command, str(error))


@reconcile.command("decisions")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--data-dir", help="Where the warehouse is (default: $COMMOPS_DATA_DIR or ./data).")
@click.pass_context
def decisions(ctx: click.Context, file: str, data_dir: str | None) -> None:
    """Take the decisions of a filled-in CSV: the reconciliation CSV (`decision`: confirm / reject) or the plan CSV
    (`decision`: approve / exclude), as Excel saves it. Prints what was taken and why a row was refused."""
    try:
        with open(file, "rb") as handle:
            data = handle.read()
    except OSError as error:
        fail("reconcile decisions", f"cannot read {file}: {error.strerror}")
    crm = None
    try:
        crm = crm_resource()
    except ReconcileError:
        pass  # a plan file and rejections need no CRM; a confirm says so on its row
    report = _act(ctx, "reconcile decisions", data_dir,
                  lambda warehouse: actions.apply_decisions_file(warehouse, crm, _org(ctx), data, os_user()))
    table = Table()
    for name in ("line", "decision", "kol_id", "crm_id", "taken", "why"):
        table.add_column(name)
    rows = report.to_pylist()
    for row in rows:
        table.add_row(str(row["line"]), row["decision"], row["kol_id"] or "", row["crm_id"] or "",
                      "yes" if row["taken"] else "no", row["reason"])
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    taken = sum(row["taken"] for row in rows)
    console.print(f"{taken:,} of {len(rows):,} decisions taken; refused rows say why (audited in crm_writeback_audit).")
    if taken < len(rows):
        sys.exit(1)


@reconcile.command("apply-approved")
@click.option("--data-dir", help="Where the warehouse is (default: $COMMOPS_DATA_DIR or ./data).")
@click.pass_context
def apply_approved(ctx: click.Context, data_dir: str | None) -> None:
    """Write the approved planned changes to Salesforce (and nothing else), read them back, audit them."""
    outcome = _act(ctx, "reconcile apply-approved", data_dir,
                   lambda warehouse: actions.apply_approved(warehouse, crm_resource(), _org(ctx), os_user()))
    modes = outcome["mode"].to_pylist()
    click.echo(f"Applied {modes.count('applied'):,} of {len(modes):,} approved field values; "
               f"not applied {len(modes) - modes.count('applied'):,} (crm_writeback_audit says why).")
    if len(modes) != modes.count("applied"):
        sys.exit(1)


@reconcile.command("undo")
@click.argument("audit_id")
@click.option("--data-dir", help="Where the warehouse is (default: $COMMOPS_DATA_DIR or ./data).")
@click.pass_context
def undo(ctx: click.Context, audit_id: str, data_dir: str | None) -> None:
    """Write back the old value of an applied update or confirm (crm_writeback_audit.audit_id), audited."""
    outcome = _act(ctx, "reconcile undo", data_dir,
                   lambda warehouse: actions.undo(warehouse, crm_resource(), _org(ctx), audit_id, os_user()))
    [row] = outcome.to_pylist()
    if row["mode"] != "applied":
        fail("reconcile undo", f"the undo of {audit_id} was not applied: {row['error']} (audited)")
    click.echo(f"Undone: {row['field']} of contact {row['crm_id']} is {row['crm_value_after'] or '∅'} again "
               f"(audit {row['audit_id']}).")


@click.group("crm")
def crm() -> None:
    """The CRM side: a local Salesforce sandbox for trying the reconciliation."""


@crm.command("sandbox")
@click.option("--data-dir", help="Where everything goes (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--port", default=8443, show_default=True, type=click.IntRange(0, 65535), help="HTTPS port of the stand-in.")
@click.option("--discrepancy-rate", default=0.1, show_default=True, type=click.FloatRange(0, 1),
              help="Share of KOLs given a planted discrepancy.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the planted discrepancies.")
def sandbox(data_dir: str | None, port: int, discrepancy_rate: float, seed: int) -> None:
    """Serve a Salesforce stand-in (HTTPS, 127.0.0.1) with contacts planted from the local service's KOLs."""
    from commops_cli.crm_sandbox import start_sandbox
    from commops_cli.local_service import ensure_seeded, start_local_service

    data = writable_data_dir("crm sandbox", data_dir)
    require_free_port("crm sandbox", port)
    db_path, credentials = ensure_seeded(data, echo=click.echo)
    service = start_local_service(db_path)
    try:
        box = start_sandbox(data, base_url=service.base_url, api_key=credentials.api_key, port=port,
                            rate=discrepancy_rate, seed=seed)
    finally:
        service.stop()
    click.echo(f"Salesforce stand-in: {box.standin.url} with {box.contacts:,} contacts "
               f"(the statuses they should get: {', '.join(f'{n} {s}' for s, n in sorted(box.planted.items()))})")
    click.echo(f"Its SALESFORCE_* settings (password included, mode 0600): {box.env_file}")
    click.echo(f"In another shell:  set -a; . {os.path.relpath(box.env_file)}; set +a; .venv/bin/commops reconcile")
    click.echo("Ctrl-C stops it (its contacts live in memory; the next start plants them anew).")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        box.stop()
