"""`commops events apply`: the incremental job, in this process, until no event is ready (for shells
and cron jobs without the Dagster daemon; commops_cli/events_apply.py); `commops events follow`: the same as
events arrive, until stopped (commops_cli/events_follow.py); `commops events status`: the inbox's counts and the
events set aside; `commops events retry`: quarantined or failing events back to pending. The first two import
Dagster when they run; the others never do."""

from __future__ import annotations

import signal
import threading

import click

from commops_cli.command_checks import fail
from resources.inbox import Inbox, InboxUnreachable, open_inbox
from resources.settings import API_KEY_ENV, SettingsError, load_settings
from webhooks.routing import BATCH_LIMIT

LISTED = 100  # events listed per state by `status`
POLL_SECONDS = 0.2  # how often `events follow` asks the inbox whether an event is ready


@click.group("events")
def events() -> None:
    """Webhook events in the inbox (COMMOPS_INBOX_URL, else $COMMOPS_DATA_DIR/inbox/webhooks.db): apply them, count them, retry them."""


@events.command("apply")
@click.option("--base-url", help="Service address including /v1 (default: $COMMOPS_BASE_URL).")
@click.option("--api-key-env", default=API_KEY_ENV, show_default=True, help="Environment variable holding the API key.")
@click.option("--data-dir", help="Data directory of the inbox and the warehouse (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--batch", "limit", type=click.IntRange(min=1), default=BATCH_LIMIT, show_default=True, help="Events per run.")
def apply(base_url, api_key_env, data_dir, limit) -> None:
    """Apply every pending event now, in this process (the job the sensor runs), then publish analytics.duckdb."""
    from commops_cli.events_apply import ApplyError, run_apply

    try:
        summary = run_apply(base_url=base_url, data_dir=data_dir, api_key_env=api_key_env, limit=limit)
    except (SettingsError, ApplyError, InboxUnreachable) as error:
        fail("events apply", f"{error} (the events stay pending)")
    kinds = ", ".join(f"{name} {n}" for name, n in sorted(summary.by_kind.items())) or "none"
    tables = ", ".join(f"{name} {n}" for name, n in sorted(summary.rows_written.items())) or "none"
    counts = summary.counts
    click.echo(
        f"commops events apply: {summary.events} event(s) applied in {summary.runs} run(s); {counts['pending']} pending "
        f"({counts['backing_off']} waiting to be retried), {counts['quarantined']} quarantined"
    )
    click.echo(f"  by kind:      {kinds}")
    click.echo(f"  rows written: {tables}")
    if summary.quarantined:
        click.echo(f"  quarantined now: {', '.join(summary.quarantined)} (see commops events status)")


def _inbox(command: str, data_dir: str | None) -> Inbox:
    """The inbox the pipeline uses (COMMOPS_INBOX_URL, else the data directory's file), opened."""
    try:
        settings = load_settings(data_dir=data_dir)
        return open_inbox(settings.data_dir, max_attempts=settings.events_max_attempts)
    except (SettingsError, InboxUnreachable) as error:
        fail(command, str(error))


@events.command("follow")
@click.option("--base-url", help="Service address including /v1 (default: $COMMOPS_BASE_URL).")
@click.option("--api-key-env", default=API_KEY_ENV, show_default=True, help="Environment variable holding the API key.")
@click.option("--data-dir", help="Data directory of the inbox and the warehouse (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--batch", "limit", type=click.IntRange(min=1), default=BATCH_LIMIT, show_default=True, help="Events per run at most.")
@click.option("--poll-seconds", type=click.FloatRange(min=0.05), default=POLL_SECONDS, show_default=True,
              help="How often the inbox is asked whether an event is ready.")
def follow_events(base_url, api_key_env, data_dir, limit, poll_seconds) -> None:
    """Apply events as they arrive, in this process, until stopped (SIGTERM or Ctrl-C ends it after the run in
    progress). Each batch is an apply_webhook_events run in the Dagster instance ($DAGSTER_HOME); the sensor
    stands down while this runs."""
    from commops_cli.events_apply import ApplyError, apply_setup
    from commops_cli.events_follow import follow
    from commops_cli.in_process import job_runner

    try:
        settings, resources = apply_setup(base_url, data_dir, api_key_env)
    except (SettingsError, ApplyError) as error:
        fail("events follow", str(error))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def say(line: str) -> None:
        click.echo(f"commops events follow: {line}", err=True)

    with job_runner(settings, resources, marts=False) as runner:
        say(f"applying events as they arrive from the inbox {resources['inbox'].where}; stop with Ctrl-C")
        follow(runner, resources, stop, say, limit=limit, poll_seconds=poll_seconds)
    say("stopped")


@events.command("status")
@click.option("--data-dir", help="Data directory of the inbox (default: $COMMOPS_DATA_DIR or ./data).")
def status(data_dir) -> None:
    """The inbox's counts, then the quarantined and the failing events (id, name, attempts, error), one line each."""
    with _inbox("events status", data_dir) as box:
        counts = box.counts()
        quarantined = box.quarantined(limit=LISTED)
        failing = box.failing(limit=LISTED)
    click.echo(
        f"inbox {box.where}: total {counts['total']}, pending {counts['pending']} "
        f"(failing {counts['failing']}, backing off {counts['backing_off']}, held by a run {counts['claimed']}), applied {counts['applied']}, "
        f"quarantined {counts['quarantined']}, unknown event names {counts['unknown_event']}"
    )
    for event in quarantined:
        click.echo(f"  quarantined {event.id} {event.event}: {event.attempts} attempt(s), error: {event.last_error}")
    if counts["quarantined"] > len(quarantined):
        click.echo(f"  ... and {counts['quarantined'] - len(quarantined)} more quarantined")
    for event in failing:
        when = f"next attempt after {event.retry_after}" if event.retry_after else "ready"
        click.echo(f"  failing {event.id} {event.event}: {event.attempts} attempt(s), {when}, last error: {event.last_error}")
    if counts["failing"] > len(failing):
        click.echo(f"  ... and {counts['failing'] - len(failing)} more failing")
    if counts["quarantined"]:
        click.echo("Put them back with: commops events retry ID [ID ...] or commops events retry --all")


@events.command("retry")
@click.argument("event_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every quarantined or failing event.")
@click.option("--data-dir", help="Data directory of the inbox (default: $COMMOPS_DATA_DIR or ./data).")
def retry(event_ids, every, data_dir) -> None:
    """Put quarantined (or failing) events back to pending now: attempts reset, their last error kept.
    The sensor, or `commops events apply`, then applies them."""
    if bool(event_ids) == every:
        fail("events retry", "name event ids or give --all (not both)", 2)
    with _inbox("events retry", data_dir) as box:
        if every:
            back = box.retry()
        else:
            known = {event.id: event for event in box.get(event_ids)}
            unknown = [event_id for event_id in event_ids if event_id not in known]
            if unknown:
                fail("events retry", f"no event {', '.join(unknown)} in the inbox {box.where}")
            applied = [event_id for event_id in event_ids if known[event_id].applied_at is not None]
            if applied:
                fail("events retry", f"{', '.join(applied)} already applied: nothing to retry")
            back = box.retry(event_ids)
    click.echo(f"commops events retry: {len(back)} event(s) back to pending" + (f": {', '.join(back)}" if back else ""))
