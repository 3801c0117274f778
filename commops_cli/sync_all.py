"""`commops sync --all`: every organization, each synced by its own `commops sync --org NAME` process,
at most `max_parallel` at once. Each has its own API client and rate budget and fails alone: the
others land. One line per organization as it ends, then a table, then one marts build for all of them;
exit 0 when all landed, 1 when one (or the marts build) failed, 124 when one ran out of `--timeout` (and none failed otherwise), 3 when only blocking checks failed."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from commops_cli import exit_codes
from commops_cli.command_checks import fail
from resources.orgs import OrgRegistry, default_org
from resources.settings import SettingsError, load_settings


@dataclass
class OrgOutcome:
    org: str
    exit_code: int
    seconds: float
    line: str  # the child's last stderr line (its one-line error), or its summary
    record: dict | None


def sync_all(max_parallel: int, *, snapshot_date: str | None, base_url: str | None, api_key_env: str,
             data_dir: str | None, enrich_limit: int | None, summary_json: str | None = None,
             timeout: float | None = None, marts: bool = True) -> int:
    """`timeout` bounds the whole command: each organization's process gets what is left of it. The
    organizations' runs leave the marts alone; with `marts`, one build follows them, for every organization."""
    deadline = time.monotonic() + timeout if timeout else None
    try:
        settings = load_settings(base_url=base_url, data_dir=data_dir)
        default = functools.partial(default_org, settings.base_url, api_key_env)
        orgs = [org.name for org in OrgRegistry(settings.data_dir, default=default).all()]
    except SettingsError as error:
        fail("sync --all", str(error))
    if not orgs:
        fail("sync --all", "no organization to sync: commops orgs add NAME --base-url ... --api-key-env ..., "
                           "or set COMMOPS_BASE_URL for the default one")
    click.echo(f"commops sync --all: {len(orgs)} organization(s), {min(max_parallel, len(orgs))} at a time: {', '.join(orgs)}")
    options = ["--data-dir", str(settings.data_dir), "--api-key-env", api_key_env, "--no-marts"]
    options += ["--date", snapshot_date] if snapshot_date else []
    options += ["--base-url", base_url] if base_url else []
    options += ["--enrich-limit", str(enrich_limit)] if enrich_limit is not None else []
    with tempfile.TemporaryDirectory(prefix="commops-sync-all-") as scratch, \
            ThreadPoolExecutor(max_workers=max_parallel) as pool:
        outcomes = list(pool.map(lambda org: _sync_one(org, options, Path(scratch), deadline), orgs))
    _print_table(outcomes)
    if summary_json:
        Path(summary_json).write_text(json.dumps([o.record or {"org": o.org, "error": o.line} for o in outcomes]))
    failed = [o for o in outcomes if o.exit_code != exit_codes.LANDED]
    if failed:
        click.echo(f"commops sync --all: {len(failed)} of {len(outcomes)} organization(s) failed: "
                   + ", ".join(o.org for o in failed), err=True)
    codes = {o.exit_code for o in failed}
    built = _build_marts(settings.data_dir, deadline) if marts and len(failed) < len(outcomes) else exit_codes.LANDED
    codes |= {built} - {exit_codes.LANDED}
    if codes - {exit_codes.TIMED_OUT, exit_codes.BLOCKING_CHECKS_FAILED}:
        return exit_codes.FAILED
    for code in (exit_codes.TIMED_OUT, exit_codes.BLOCKING_CHECKS_FAILED):
        if code in codes:
            return code
    return exit_codes.LANDED


def _build_marts(data_dir: Path, deadline: float | None) -> int:
    """The marts, once for every organization that landed; its exit code (0 when built, swapped in or not)."""
    from commops_cli.marts import run_marts_build
    from commops_cli.run_deadline import DeadlineExpired, run_deadline

    click.echo("commops sync --all: building the marts once, for every organization")
    try:
        with run_deadline(None if deadline is None else max(deadline - time.monotonic(), 0.1)):
            build = run_marts_build(data_dir)
    except DeadlineExpired:
        click.echo("commops sync --all: --timeout expired while the marts were built; analysts keep the last good "
                   "marts", err=True)
        return exit_codes.TIMED_OUT
    if build.failure is not None:
        click.echo(f"commops sync --all: the marts build failed: {build.failure}", err=True)
        return exit_codes.FAILED
    click.echo(f"  marts: {build.outcome}" + "".join(f"; check failed: {check}" for check in build.failed_checks))
    return exit_codes.LANDED


def _sync_one(org: str, options: list[str], scratch: Path, deadline: float | None) -> OrgOutcome:
    record_path = scratch / f"{org}.json"
    if deadline is not None:
        options = [*options, "--timeout", f"{max(deadline - time.monotonic(), 0.1):.1f}"]
    command = [sys.executable, "-m", "commops_cli", "sync", "--org", org, "--no-progress",
               "--summary-json", str(record_path), *options]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.monotonic() - started
    record = json.loads(record_path.read_text()) if record_path.exists() else None
    errors = [line for line in done.stderr.strip().splitlines() if line.strip()]
    if done.returncode == 0:
        line = "ok"
    else:
        line = errors[-1] if errors else f"exit {done.returncode}"
    click.echo(f"  {org}: {'landed' if done.returncode == 0 else 'FAILED'} in {seconds:.1f}s"
               + ("" if done.returncode == 0 else f": {line}"))
    return OrgOutcome(org, done.returncode, seconds, line, record)


def _print_table(outcomes: list[OrgOutcome]) -> None:
    table = Table(title="commops sync --all")
    for column in ("organization", "result", "KOLs", "campaigns", "products", "signals", "seconds", "peak RSS MB"):
        table.add_column(column, justify="left" if column in ("organization", "result") else "right")
    for o in outcomes:
        rows = (o.record or {}).get("rows", {})
        result = "landed" if o.exit_code == exit_codes.LANDED else o.line
        table.add_row(o.org, result, *(f"{rows[f'warehouse/{t}']:,}" if rows.get(f"warehouse/{t}") is not None else "-"
                                       for t in ("kols", "campaigns", "products", "signals")), f"{o.seconds:.1f}",
                      f"{o.record['peak_rss_mb']:.0f}" if o.record else "-")
    Console(width=None if sys.stdout.isatty() else 200).print(table)
