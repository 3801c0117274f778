"""`commops events apply`: the incremental job, in this process, until no event is pending (for shells
and cron jobs without the Dagster daemon); `commops events status`: the inbox's counts."""

from __future__ import annotations

import logging
import sys
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field

import click
import dagster as dg

from assets.webhook_events import APPLY_STEP, BATCH_LIMIT
from pipelines.cli.command_checks import check_writable
from pipelines.cli.dagster_home import dagster_instance
from pipelines.definitions import build_resources, make_definitions
from pipelines.jobs import APPLY_WEBHOOK_EVENTS
from pipelines.cli.in_process import QUIET_CONSOLE, failure_message, metadata_value
from pipelines.cli.sync import SyncError
from resources.inbox import InboxResource
from resources.settings import API_KEY_ENV, SettingsError, load_settings, require_api_key


@dataclass
class ApplySummary:
    runs: int = 0
    events: int = 0
    by_kind: Counter = field(default_factory=Counter)
    rows_written: Counter = field(default_factory=Counter)
    pending: int = 0


def run_apply(
    base_url: str | None = None,
    data_dir: str | None = None,
    api_key_env: str = API_KEY_ENV,
    limit: int = BATCH_LIMIT,
    instance: dg.DagsterInstance | None = None,
) -> ApplySummary:
    """Run apply_webhook_events in-process, batch after batch, until nothing is pending; SyncError on failure."""
    settings = load_settings(base_url=base_url, data_dir=data_dir)
    settings = settings.model_copy(update={"base_url": settings.require_base_url()})
    require_api_key(api_key_env)
    try:
        check_writable(settings.data_dir)
    except OSError as error:
        raise SyncError(f"cannot write to the data directory {settings.data_dir}: {error.strerror or error}") from None
    inbox = InboxResource(data_dir=str(settings.data_dir))
    job = make_definitions(settings, build_resources(settings, api_key_env=api_key_env)).resolve_job_def(APPLY_WEBHOOK_EVENTS)
    summary = ApplySummary()
    run_config = {
        "ops": {APPLY_STEP: {"config": {"limit": limit}}},
        **QUIET_CONSOLE,
    }
    logging.getLogger("commops").setLevel(logging.INFO)
    with dagster_instance(settings) if instance is None else nullcontext(instance) as dagster:
        while True:
            box = inbox.open()
            pending = box.counts()["pending"]
            box.close()
            if not pending:
                break
            result = job.execute_in_process(run_config=run_config, instance=dagster, raise_on_error=False)
            summary.runs += 1
            if not result.success:
                raise SyncError(failure_message(result))
            applied = 0
            for event in result.get_asset_materialization_events():
                materialization = event.materialization
                metadata = dict(materialization.metadata)
                if materialization.asset_key.path == ["warehouse", "webhook_events"]:
                    summary.events += metadata_value(metadata, "events") or 0
                    summary.by_kind.update(metadata_value(metadata, "events_by_kind") or {})
                    summary.rows_written.update(metadata_value(metadata, "rows_written") or {})
                if materialization.asset_key.path == ["webhooks", "applied"]:
                    applied = metadata_value(metadata, "events_marked_applied") or 0
            if not applied:  # nothing could be applied: stop rather than loop
                break
    box = inbox.open()
    summary.pending = box.counts()["pending"]
    box.close()
    return summary


@click.group("events")
def events() -> None:
    """Webhook events in the inbox ($COMMOPS_DATA_DIR/inbox/webhooks.db): apply them, count them."""


@events.command("apply")
@click.option("--base-url", help="Service address including /v1 (default: $COMMOPS_BASE_URL).")
@click.option("--api-key-env", default=API_KEY_ENV, show_default=True, help="Environment variable holding the API key.")
@click.option("--data-dir", help="Data directory of the inbox and the warehouse (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--batch", "limit", type=click.IntRange(min=1), default=BATCH_LIMIT, show_default=True, help="Events per run.")
def apply(base_url, api_key_env, data_dir, limit) -> None:
    """Apply every pending event now, in this process (the job the sensor runs), then publish analytics.duckdb."""
    try:
        summary = run_apply(base_url=base_url, data_dir=data_dir, api_key_env=api_key_env, limit=limit)
    except (SettingsError, SyncError) as error:
        click.echo(f"commops events apply failed: {error} (the events stay pending)", err=True)
        sys.exit(1)
    kinds = ", ".join(f"{name} {n}" for name, n in sorted(summary.by_kind.items())) or "none"
    tables = ", ".join(f"{name} {n}" for name, n in sorted(summary.rows_written.items())) or "none"
    click.echo(f"commops events apply: {summary.events} event(s) applied in {summary.runs} run(s); {summary.pending} pending")
    click.echo(f"  by kind:      {kinds}")
    click.echo(f"  rows written: {tables}")


@events.command("status")
@click.option("--data-dir", help="Data directory of the inbox (default: $COMMOPS_DATA_DIR or ./data).")
def status(data_dir) -> None:
    """Counts of the inbox: total, pending, applied, failing (pending after a failed run), unknown event names."""
    try:
        settings = load_settings(data_dir=data_dir)
    except SettingsError as error:
        click.echo(f"commops events status failed: {error}", err=True)
        sys.exit(1)
    inbox = InboxResource(data_dir=str(settings.data_dir))
    box = inbox.open()
    counts = box.counts()
    failing = [e for e in box.pending(limit=BATCH_LIMIT) if e.attempts]
    box.close()
    click.echo(f"inbox {inbox.path}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for event in failing[:5]:
        click.echo(f"  failing {event.id} {event.event}: {event.attempts} attempt(s), last error: {event.last_error}")
