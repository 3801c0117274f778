"""`commops reconcile` (KOLs against the CRM, reports, optional write-back) and `commops crm sandbox`
(a local Salesforce stand-in seeded from the local service's KOLs)."""

from __future__ import annotations

import os
import sys
import threading

import click
from rich.console import Console
from rich.table import Table

from pipelines.cli.command_checks import fail, require_free_port, writable_data_dir
from pipelines.cli.reconcile import ReconcileError, ReconciliationSummary, run_reconciliation
from resources.crm.errors import CrmError
from resources.settings import SettingsError


def print_reconciliation(summary: ReconciliationSummary, console: Console) -> None:
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
    if planned:
        mode = "applied" if planned.get("applied") else "dry run (commops reconcile --apply writes them)"
        console.print(
            f"Write-back, {mode}: {planned.get('creates', 0):,} contacts to create, "
            f"{planned.get('updates', 0):,} to update ({planned.get('fields', 0):,} field values in all); "
            f"failed {planned.get('failed', 0):,}",
            soft_wrap=True,
        )
    console.print(f"Report:  {summary.report_html}", soft_wrap=True)
    console.print(f"CSV:     {summary.report_csv}", soft_wrap=True)
    console.print("Tables:  kol_crm_reconciliation, reconciliation_runs, crm_writeback_audit in analytics.duckdb")


def reconcile_and_report(command: str, **kwargs) -> ReconciliationSummary:
    """Run the reconciliation and print its summary; on failure one line and exit 1."""
    try:
        summary = run_reconciliation(**kwargs)
    except (SettingsError, ReconcileError, CrmError) as error:
        fail(command, str(error))
    print_reconciliation(summary, Console(width=None if sys.stdout.isatty() else 160))
    return summary


@click.command("reconcile")
@click.option("--data-dir", help="Where the warehouse and reports are (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--apply", is_flag=True,
              help="Write the fixes to the CRM: create missing contacts and update the fields whose policy says the KOL "
                   "record wins (never deletes). Default: a dry run that only lists them.")
def reconcile(data_dir: str | None, apply: bool) -> None:
    """Reconcile the warehouse's KOLs against the CRM's contacts by email; write the reports."""
    data = writable_data_dir("reconcile", data_dir)
    reconcile_and_report("reconcile", data_dir=data, apply=apply)


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
    from pipelines.cli.crm_sandbox import start_sandbox
    from pipelines.cli.local_service import ensure_seeded, start_local_service

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
