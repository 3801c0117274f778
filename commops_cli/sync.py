"""`commops sync`: run the nightly job now, with progress, a summary table and clear failures."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.table import Table

from commops_cli import exit_codes
from commops_cli.command_checks import fail
from commops_cli.marts import marts_outcome
from commops_cli.processes import peak_rss_mb
from commops_cli.run_deadline import Deadline, DeadlineExpired, Duration, describe, run_deadline
from commops_cli.sync_checks import CHECKED_OPTIONS, BlockingChecksFailed, SyncError, check_sync
from commops_cli.sync_all import sync_all
from resources.orgs import DEFAULT_ORG
from resources.settings import API_KEY_ENV, SettingsError


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _python() -> str:
    """The interpreter of this environment, relative to the working directory when inside it."""
    try:
        return os.path.relpath(sys.executable)
    except ValueError:
        return sys.executable


def print_summary(summary, console: Console) -> None:
    from assets.mart_keys import MARTS_GROUP, SWAPPED_IN  # Dagster: imported once a run has ended

    table = Table(title=f"commops sync {summary.org} {summary.snapshot_date}: done in {summary.duration_seconds:.1f}s")
    for column in ("asset", "rows", "requests", "429s", "throttled s", "duration s", "note"):
        table.add_column(column, justify="left" if column in ("asset", "note") else "right", no_wrap=column == "asset")
    marts = [a for a in summary.assets if a.asset.startswith(f"{MARTS_GROUP}/")]
    for a in summary.assets:
        if a not in marts:
            table.add_row(a.asset, _fmt(a.rows), _fmt(a.requests), _fmt(a.rate_limited), _fmt(a.throttled_seconds),
                          _fmt(a.duration_seconds), a.note)
    console.print(table)
    if marts:  # dbt's models: one line, not a row each with nothing the sync counts
        kept = any(a.metadata.get(SWAPPED_IN) is False for a in marts)
        console.print(f"Marts: {len(marts)} dbt models {marts_outcome(not kept)}")
    if summary.failed_checks:
        console.print(f"[bold red]Failed checks:[/] {', '.join(summary.failed_checks)}")
    console.print(f"Lake (Parquet):  {summary.lake_path}/org={summary.org}/<resource>/snapshot_date={summary.snapshot_date}/",
                  soft_wrap=True)
    console.print(f"Warehouse:       {summary.warehouse_path} (written by the sync only)", soft_wrap=True)
    console.print(f"Analysts query:  {summary.analytics_path}", soft_wrap=True)
    console.print(
        f"  {_python()} -c \"import duckdb; print(duckdb.connect('{summary.analytics_path}', read_only=True, "
        f"config={{'file_search_path': '{summary.data_dir}'}})"
        ".sql('SELECT tier, count(*) AS kols FROM kols GROUP BY tier ORDER BY tier'))\"",
        soft_wrap=True,
    )
    console.print("  Schema and example queries: docs/analysts.md")


@click.command("sync")
@click.option("--org", default=None, metavar="NAME",
              help="The organization to sync (commops orgs list; default: the organization `default`, COMMOPS_BASE_URL).")
@click.option("--all", "all_orgs", is_flag=True, help="Sync every organization, each in its own process.")
@click.option("--max-parallel", type=click.IntRange(min=1), default=2, show_default=True,
              help="With --all: organizations synced at once.")
@click.option("--date", "snapshot_date", metavar="YYYY-MM-DD", help="Snapshot date: only today's date (COMMOPS_TIMEZONE) is accepted, since the API serves only current data.")
@click.option("--base-url", help="The default organization's service address including /v1 (default: $COMMOPS_BASE_URL).")
@click.option("--api-key-env", default=API_KEY_ENV, show_default=True, help="Environment variable holding the default organization's API key.")
@click.option("--data-dir", help="Where the lake and DuckDB files go (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--enrich-limit", type=click.IntRange(min=0), help="KOL details fetched at most this run (default: $COMMOPS_ENRICH_DETAILS_LIMIT or 5000; 0 skips).")
@click.option("--no-progress", is_flag=True, help="No progress bars (also off when stderr is not a terminal).")
@click.option("--no-marts", is_flag=True,
              help="Leave the analysts' marts as they are (build them once later: commops marts build). "
                   "With --all the marts are built once, after every organization.")
@click.option("--timeout", type=Duration(), default=None,
              help="Stop the run if it has not ended after this long (90s, 45m, 2h); exit 124.")
@click.option("--summary-json", type=click.Path(dir_okay=False), hidden=True, help="Also write the summary as JSON here.")
def sync(org, all_orgs, max_parallel, snapshot_date, base_url, api_key_env, data_dir, enrich_limit, no_progress,
         no_marts, timeout, summary_json) -> None:
    """Run the nightly sync now, in this process: API -> Parquet lake -> DuckDB warehouse -> analytics.duckdb.
    With --all, every organization, up to --max-parallel at once, each in its own process.

    Exit codes: 0 landed, 1 failed, 2 usage error, 3 a blocking check failed, 124 --timeout expired,
    130 interrupted (docs/operators.md)."""
    if all_orgs and org:
        fail("sync", "--org and --all exclude each other: one organization, or every one", exit_codes.USAGE)
    if all_orgs:
        sys.exit(sync_all(max_parallel, snapshot_date=snapshot_date, base_url=base_url, api_key_env=api_key_env,
                          data_dir=data_dir, enrich_limit=enrich_limit, summary_json=summary_json, timeout=timeout,
                          marts=not no_marts))
    run_and_report(
        "sync",
        timeout=timeout,
        snapshot_date=snapshot_date,
        base_url=base_url,
        api_key_env=api_key_env,
        data_dir=data_dir,
        progress=not no_progress and sys.stderr.isatty(),
        enrich_details_limit=enrich_limit,
        org=org or DEFAULT_ORG,
        marts=not no_marts,
        summary_json=summary_json,
    )


def run_and_report(command: str, summary_json: str | None = None, timeout: float | None = None,
                   no_marts_note: str = "Marts: not built (--no-marts); build them with: commops marts build",
                   **run_kwargs) -> None:
    """Run the sync in-process and print its summary; on failure one line and its exit code (exit_codes):
    1 failed, 3 a blocking check failed, 124 `timeout` expired, 130 interrupted. Checks that only warn
    print one line each and the run exits 0: it landed. A run without the marts prints `no_marts_note`
    (when not empty)."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    org = run_kwargs.get("org", DEFAULT_ORG)
    where = "" if org == DEFAULT_ORG else f" ({org})"
    deadline = Deadline()
    try:
        with run_deadline(timeout) as deadline:
            checked = check_sync(**{name: run_kwargs[name] for name in CHECKED_OPTIONS if name in run_kwargs})
            from commops_cli.sync_run import run_sync  # Dagster and the code location: only once the checks pass

            summary = run_sync(**run_kwargs, checked=checked)
    except DeadlineExpired:
        timed_out(command, where, timeout)
    except BlockingChecksFailed as error:
        click.echo(f"commops {command} failed{where}: {error}", err=True)
        sys.exit(exit_codes.BLOCKING_CHECKS_FAILED)
    except (SettingsError, SyncError) as error:
        if deadline.expired:  # the interrupt landed inside a step: Dagster failed the run with it
            timed_out(command, where, timeout)
        click.echo(f"commops {command} failed{where}: {error}", err=True)
        sys.exit(exit_codes.FAILED)
    except KeyboardInterrupt:
        click.echo(f"commops {command} interrupted: no partial snapshot was published", err=True)
        sys.exit(exit_codes.INTERRUPTED)
    print_summary(summary, console)
    if not run_kwargs.get("marts", True) and no_marts_note:
        console.print(no_marts_note)
    if summary_json:
        Path(summary_json).write_text(json.dumps(summary_record(summary)))
    for failure in summary.check_failures:  # landed: these only warn
        click.echo(f"commops {command}{where}: WARN check {failure.check} failed"
                   + (f": {failure.description}" if failure.description else ""), err=True)


def timed_out(command: str, where: str, timeout: float | None) -> NoReturn:
    click.echo(f"commops {command} failed{where}: --timeout {describe(timeout)} expired; the run was stopped "
               "and no partial snapshot was published", err=True)
    sys.exit(exit_codes.TIMED_OUT)


def summary_record(summary) -> dict:
    """What `sync --all` reports of one organization's run."""
    rows = {a.asset: a.rows for a in summary.assets if a.asset.startswith("warehouse/")}
    return {"org": summary.org, "run_id": summary.run_id, "seconds": summary.duration_seconds,
            "failed_checks": summary.failed_checks, "rows": rows, "peak_rss_mb": round(peak_rss_mb(), 1)}
