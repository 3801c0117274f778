"""`commops webhooks register|list|update|delete|test|rotate`: the service's webhook subscriptions,
managed with the pipeline's COMMOPS_BASE_URL and COMMOPS_API_KEY, or with `--org NAME` those of a
registered organization; each new secret goes to the secrets file the receiver reads
($COMMOPS_DATA_DIR/webhook-secrets.json), bound to the organization's id with `--org`."""

from __future__ import annotations

from pathlib import Path

import click

from commops_spec.constants import EVENTS
from webhooks.receiver.settings import load_receiver_settings


def _secrets_file(data_dir: str | None) -> Path:
    try:
        return load_receiver_settings(data_dir).secrets_file
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


_data_dir_option = click.option("--data-dir", help="Where the receiver's secrets file (and the organization "
                                "registry) live (default: $COMMOPS_DATA_DIR or ./data).")
_org_option = click.option("--org", "org_name", metavar="NAME",
                           help="A registered organization (commops orgs add ... --organization-id org_...): its "
                           "service and key are used, and a new secret is bound to its organization id, so the "
                           "receiver accepts it for that organization's events only. Default: COMMOPS_BASE_URL "
                           "and COMMOPS_API_KEY, secret unbound.")


def _events(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if value.strip() == "all":
        return list(EVENTS)
    unknown = [name for name in names if name not in EVENTS]
    if unknown or not names:
        raise click.BadParameter(f"unknown event names {', '.join(unknown) or '(none given)'}; "
                                 f"known: all, {', '.join(EVENTS)}", param_hint="--events")
    return names


def _api(org_name: str | None, data_dir: str | None):
    from webhooks.subscriptions import SubscriptionError, Subscriptions
    from resources.orgs import OrgRegistry
    from resources.settings import SettingsError, load_settings

    try:
        if org_name is None:
            return Subscriptions.from_env()
        return Subscriptions.for_org(OrgRegistry(data_dir or load_settings().data_dir).get(org_name))
    except (SubscriptionError, SettingsError) as exc:
        raise click.ClickException(str(exc)) from None


def _calling(fn, org_name: str | None = None, data_dir: str | None = None):
    """Run fn(api) against the service of `org_name` (default: the environment's), turning
    SubscriptionError into a one-line click error."""
    from webhooks.subscriptions import SubscriptionError
    from webhooks.signatures import SecretsFileError

    with _api(org_name, data_dir) as api:
        try:
            return fn(api)
        except (SubscriptionError, SecretsFileError) as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"{exc.filename or 'secrets file'}: {exc.strerror}") from None


@click.group()
def webhooks() -> None:
    """Subscriptions of the service's webhooks (COMMOPS_BASE_URL, COMMOPS_API_KEY with webhooks:write)."""


@webhooks.command("register")
@click.argument("url")
@click.option("--events", default="all", show_default=True, help="Comma-separated event names, or all.")
@_org_option
@_data_dir_option
def register(url: str, events: str, org_name: str | None, data_dir: str | None) -> None:
    """Register URL (the receiver's public https://.../webhooks/commops) with a new secret."""
    secrets_file = _secrets_file(data_dir)
    names = _events(events)
    created = _calling(lambda api: api.register(url, names, secrets_file), org_name, data_dir)
    click.echo(f"Registered {created['id']} -> {created['url']} ({len(created['events'])} events)")
    click.echo(f"Its secret is in {secrets_file} (mode 0600); the receiver picks it up without a restart.")
    click.echo(created["id"])


@webhooks.command("list")
@_org_option
@_data_dir_option
def list_(org_name: str | None, data_dir: str | None) -> None:
    """The organization's webhooks."""
    found = _calling(lambda api: api.list(), org_name, data_dir)
    if not found:
        click.echo("No webhooks.")
    for w in found:
        state = ("enabled" if w["enabled"] else "disabled") + ("" if w["status"] == "active" else f", {w['status']}")
        click.echo(f"{w['id']}  {w['url']}  [{state}]  {','.join(w['events']) if len(w['events']) < len(EVENTS) else 'all events'}")


@webhooks.command("update")
@click.argument("webhook_id")
@click.option("--events", help="New comma-separated event names, or all.")
@click.option("--enable/--disable", "enabled", default=None, help="Hold (disable) or resume (enable) deliveries.")
@_org_option
@_data_dir_option
def update(webhook_id: str, events: str | None, enabled: bool | None, org_name: str | None, data_dir: str | None) -> None:
    """Change a webhook's events or enabled flag (the URL and secret cannot change: see rotate)."""
    updated = _calling(lambda api: api.update(webhook_id, _events(events), enabled), org_name, data_dir)
    click.echo(f"Updated {updated['id']}: {'enabled' if updated['enabled'] else 'disabled'}, "
               f"{len(updated['events'])} events")


_grace_option = click.option("--grace", default=300.0, show_default=True,
                             help="Seconds the deleted webhook's secret stays accepted (attempts in flight); 0: none.")


@webhooks.command("delete")
@click.argument("webhook_id")
@_grace_option
@_org_option
@_data_dir_option
def delete(webhook_id: str, grace: float, org_name: str | None, data_dir: str | None) -> None:
    """Delete a webhook (its queued deliveries are cancelled), then retire its secret."""
    secrets_file = _secrets_file(data_dir)
    _calling(lambda api: api.delete(webhook_id, secrets_file, grace), org_name, data_dir)
    when = f"in {grace:.0f} s" if grace > 0 else "now"
    click.echo(f"Deleted {webhook_id}; its secret leaves {secrets_file} {when}")


@webhooks.command("test")
@click.argument("webhook_id")
@click.option("--event", default="kol.created", show_default=True, type=click.Choice(EVENTS))
@_org_option
@_data_dir_option
def test(webhook_id: str, event: str, org_name: str | None, data_dir: str | None) -> None:
    """Have the service send a sample event now; prints the receiver's answer."""
    outcome = _calling(lambda api: api.test(webhook_id, event), org_name, data_dir)
    answer = outcome["status_code"] if outcome["status_code"] is not None else outcome["error"]
    click.echo(f"{event} {outcome['event_id']}: {answer} in {outcome['latency_ms']:.0f} ms")
    if not outcome["success"]:
        raise click.ClickException(f"the receiver did not acknowledge: {answer} {outcome.get('response_excerpt') or ''}".strip())


@webhooks.command("rotate")
@click.argument("webhook_id")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait for the old webhook's backlog.")
@_grace_option
@_org_option
@_data_dir_option
def rotate(webhook_id: str, timeout: float, grace: float, org_name: str | None, data_dir: str | None) -> None:
    """New secret (bound to the old one's organization): register a twin webhook, wait for the old one's
    backlog, delete the old one."""
    secrets_file = _secrets_file(data_dir)
    new = _calling(lambda api: api.rotate(webhook_id, secrets_file, timeout=timeout, grace_seconds=grace),
                   org_name, data_dir)
    click.echo(f"Rotated: {new['id']} replaces {webhook_id}; the new secret is in {secrets_file}")
    click.echo(new["id"])
