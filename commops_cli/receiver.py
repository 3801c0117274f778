"""`commops receiver run` (`commops webhooks`, which registers the receiver with the service, is a
pipeline command: commops_cli/webhooks.py)."""

from __future__ import annotations

import logging

import click


def _settings(data_dir: str | None, max_body_bytes: int | None = None):
    from webhooks.receiver.settings import load_receiver_settings

    try:
        return load_receiver_settings(data_dir, max_body_bytes)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


_data_dir_option = click.option("--data-dir", help="Where the inbox and the secrets file live (default: $COMMOPS_DATA_DIR or ./data).")


# ---------------------------------------------------------------- commops receiver


@click.group()
def receiver() -> None:
    """The webhook receiver: verifies deliveries and stores them in the inbox."""


@receiver.command("run")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", default=8787, show_default=True, type=int)
@_data_dir_option
@click.option("--max-body-bytes", type=int, help="Body cap, 413 above (default: $COMMOPS_WEBHOOK_MAX_BODY_BYTES or 16 MiB).")
def run(host: str, port: int, data_dir: str | None, max_body_bytes: int | None) -> None:
    """Receive signed deliveries on POST /webhooks/commops until Ctrl-C (or SIGTERM)."""
    from file_modes.data_dir import ModesError, secure_data_dir
    from http_serving.proxies import proxy_options
    from http_serving.server import serve
    from http_serving.sockets import BindError, bind
    from webhooks.receiver.app import HEALTH_PATH, WEBHOOK_PATH
    from webhooks.receiver.server import ReceiverStartError, open_app

    settings = _settings(data_dir, max_body_bytes)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        notice = secure_data_dir(settings.data_dir, settings.data_group)
    except (ValueError, ModesError) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot make the data directory {settings.data_dir}: {exc.strerror or exc}") from None
    if notice:
        click.echo(notice, err=True)
    try:
        app = open_app(settings)
        sock = bind(host, port)
    except ReceiverStartError as exc:
        raise click.ClickException(str(exc)) from None
    except BindError as exc:
        raise click.ClickException(f"{exc}: choose another with --port" if exc.in_use else str(exc)) from None
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"Receiving on http://{shown}:{sock.getsockname()[1]}{WEBHOOK_PATH} (health: {HEALTH_PATH})", err=True)
    click.echo(f"Inbox: {settings.inbox_where}", err=True)
    bound = sum(1 for secret in settings.secrets if secret.organization_id)
    click.echo(f"Secrets: {len(settings.secrets)} from COMMOPS_WEBHOOK_SECRETS ({bound} bound to an organization), "
               f"plus {settings.secrets_file} (re-read when it changes)", err=True)
    if not settings.secrets and not settings.secrets_file.exists():
        click.echo("Warning: no secret configured yet: every delivery gets 401 until `commops webhooks register` "
                   "or COMMOPS_WEBHOOK_SECRETS provides one", err=True)
    serve(app, sock, **proxy_options(settings.forwarded_allow_ips))
