"""`commops reconcile` (KOLs against the CRM, reports, optional write-back) and `commops crm sandbox`
(a local Salesforce stand-in seeded from the local service's KOLs)."""

from __future__ import annotations

import os
import sys
import threading

import click
from rich.console import Console
from rich.table import Table

from commops_cli.command_checks import fail, require_free_port, writable_data_dir
from commops_cli.crm_run import ReconcileError, Reconciliation, run_reconciliation, run_review
from resources.crm.errors import CrmError
from resources.settings import SettingsError


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
        summary = run_reconciliation(**kwargs)
    except (SettingsError, ReconcileError, CrmError) as error:
        fail(command, str(error))
    print_reconciliation(summary, Console(width=None if sys.stdout.isatty() else 160))
    return summary


@click.group("reconcile", invoke_without_command=True)
@click.option("--data-dir", help="Where the warehouse and reports are (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--apply", is_flag=True,
              help="Write the fixes to the CRM: create missing contacts and update the fields whose policy says the KOL "
                   "record wins (never deletes, never creates a KOL that has a probable match). Default: a dry run that "
                   "only lists them.")
@click.pass_context
def reconcile(ctx: click.Context, data_dir: str | None, apply: bool) -> None:
    """Reconcile the warehouse's KOLs against the CRM's contacts (by email, then probable matches); write the
    reports. `confirm` / `reject` answer a probable match."""
    if ctx.invoked_subcommand is not None:
        if apply:
            fail("reconcile", f"--apply goes without a subcommand (it is not an option of {ctx.invoked_subcommand})")
        ctx.obj = data_dir
        return
    data = writable_data_dir("reconcile", data_dir)
    reconcile_and_report("reconcile", data_dir=data, apply=apply)


def _review(ctx: click.Context, action: str, kol_id: str, contact_id: str, data_dir: str | None) -> None:
    command = f"reconcile {action}"
    data = writable_data_dir(command, data_dir or ctx.obj)
    try:
        outcome = run_review(action, kol_id, contact_id, data_dir=data)
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
