"""`commops review`: the CRM admins' page, served until Ctrl-C (crm/review_page)."""

from __future__ import annotations

import click

from commops_cli.command_checks import fail, writable_data_dir


@click.command("review")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on. Beyond loopback it needs COMMOPS_REVIEW_PASSWORD (or COMMOPS_REVIEW_USERS).")
@click.option("--port", default=8790, show_default=True, type=click.IntRange(0, 65535))
@click.option("--data-dir", help="Where the warehouse is (default: $COMMOPS_DATA_DIR or ./data).")
def review(host: str, port: int, data_dir: str | None) -> None:
    """Serve the page where CRM admins decide probable matches, pick duplicate masters, approve and apply the
    write-back, undo, and upload decisions from Excel."""
    from crm.review_page.app import create_app
    from crm.review_page.server import ReviewStartError, check_sign_in, configured_crm, login_url, page_config
    from crm.review_page.settings import ReviewSettingsError, load_review_settings
    from http_serving.proxies import proxy_options
    from http_serving.server import serve
    from http_serving.sockets import BindError, bind

    try:
        settings = load_review_settings()
        check_sign_in(host, settings)  # first: nothing is done for an address the page may not serve
    except (ReviewStartError, ReviewSettingsError) as error:
        fail("review", str(error))
    data = writable_data_dir("review", data_dir)
    crm, problem = configured_crm()
    config = page_config(host, data, crm, problem, settings)
    try:
        sock = bind(host, port)
    except BindError as error:
        fail("review", f"{error}: choose another with --port" if error.in_use else str(error))
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{sock.getsockname()[1]}"
    if config.access.signs_in:
        click.echo(f"Review page: {login_url(base, config.access)} (users sign in; Ctrl-C stops it)")
    else:
        click.echo(f"Review page: {login_url(base, config.access)}")
        click.echo("Open this URL in your browser: its token is this launch's, for you alone. Ctrl-C stops the page.")
    if problem:
        click.echo(f"Read-only: {problem}", err=True)
    serve(create_app(config), sock, **proxy_options(settings.forwarded_allow_ips))

