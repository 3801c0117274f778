"""`commops demo` and `commops ui`: the product on the embedded local service, no set-up needed."""

from __future__ import annotations

import os
import sys
import threading

import click
from rich.console import Console

from commops_cli.command_checks import fail, require_free_port, writable_data_dir
from commops_cli.dagster_home import prepare_home
from commops_cli.processes import run_group, signals_as_interrupts
from commops_cli.sync import run_and_report
from pipelines.definitions import CODE_LOCATION
from resources.settings import API_KEY_ENV, BASE_URL_ENV, DATA_DIR_ENV, load_settings


@click.command("demo")
@click.option("--data-dir", help="Where everything goes (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--kols", default=200, show_default=True, type=click.IntRange(min=0), help="KOLs to seed on the first run.")
@click.option("--serve", is_flag=True, help="Keep the local service up after the sync (Ctrl-C or SIGTERM stops it).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port of the local service with --serve.")
def demo(data_dir: str | None, kols: int, serve: bool, port: int) -> None:
    """Seed and start the local service, run the full nightly sync against it, reconcile its KOLs with a
    local Salesforce stand-in, show where the data and the reconciliation report are."""
    from commops_cli.crm import reconcile_and_report
    from commops_cli.crm_sandbox import start_sandbox
    from commops_cli.local_service import ensure_seeded, start_local_service
    from commops_cli.marts import build_and_report

    console = Console(width=None if sys.stdout.isatty() else 160)
    data = writable_data_dir("demo", data_dir)
    if serve:
        require_free_port("demo", port)
    db_path, credentials = ensure_seeded(data, kols=kols, echo=console.print)
    server = start_local_service(db_path, port=port if serve else 0)
    console.print(f"Local service: {server.base_url} (database {db_path})")
    os.environ[API_KEY_ENV] = credentials.api_key  # read by the API resource as a dg.EnvVar
    sandbox = None
    try:
        with signals_as_interrupts():
            # The marts are built once, after the reconciliation: they read its CRM status.
            run_and_report("demo", base_url=server.base_url, data_dir=data, progress=sys.stderr.isatty(), marts=False,
                           no_marts_note="")
            sandbox = start_sandbox(data, base_url=server.base_url, api_key=credentials.api_key)
            console.print(f"Salesforce stand-in: {sandbox.standin.url} ({sandbox.contacts:,} contacts planted from the KOLs)")
            os.environ.update(sandbox.env)  # the CRM resource reads its secrets as dg.EnvVar
            reconcile_and_report("demo", data_dir=data)
            build_and_report("demo", data_dir=data)
            if not serve:
                console.print(
                    f"The local service ({server.base_url}) and the Salesforce stand-in ({sandbox.standin.url}) stop "
                    "with the demo: those addresses answer no more. To keep the service up: .venv/bin/commops demo "
                    "--serve; to browse the runs, schedules and sensors on this data: .venv/bin/commops ui",
                    soft_wrap=True,
                )
                return
            console.print(
                f"The local service stays up at {server.base_url} (Ctrl-C stops it). From another shell:\n"
                f"  export {DATA_DIR_ENV}={data} {BASE_URL_ENV}={server.base_url}\n"
                f"  export {API_KEY_ENV}=$(.venv/bin/commops service demo-key)\n"
                "  .venv/bin/commops sync",
                soft_wrap=True,
            )
            threading.Event().wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        pass
    finally:
        if sandbox is not None:
            sandbox.stop()
        server.stop()


@click.command("ui")
@click.option("--data-dir", help="Where everything goes (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--port", default=3000, show_default=True, type=click.IntRange(1, 65535), help="Port of the Dagster UI.")
@click.option("--service-port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the local service (when used).")
def ui(data_dir: str | None, port: int, service_port: int) -> None:
    """Start the Dagster UI (dg dev) with schedules and sensors live.

    Without COMMOPS_BASE_URL, the seeded local service is started and used as the source.
    Dagster's home is the one `commops sync` and `commops demo` record their runs in
    ($DAGSTER_HOME, else $COMMOPS_DATA_DIR/dagster_home, configured by the dagster.yaml commops ships);
    Dagster runs in that directory. Ctrl-C or SIGTERM stops dg dev with all it started (webserver,
    daemon, code server, runs), then the local service.
    """
    data = writable_data_dir("ui", data_dir)
    require_free_port("ui", port)
    home = prepare_home(load_settings(data_dir=str(data)))
    if not home.is_dir():
        fail("ui", f"DAGSTER_HOME={home} is not a directory (create it with its dagster.yaml, or unset DAGSTER_HOME)")
    env = dict(os.environ, COMMOPS_DATA_DIR=str(data), DAGSTER_HOME=str(home))
    server = None
    if not os.environ.get(BASE_URL_ENV):
        from commops_cli.local_service import ensure_seeded, start_local_service

        require_free_port("ui", service_port, "--service-port")
        db_path, credentials = ensure_seeded(data, echo=click.echo)
        server = start_local_service(db_path, port=service_port)
        env[BASE_URL_ENV] = server.base_url
        env[API_KEY_ENV] = credentials.api_key
        click.echo(f"Local service: {server.base_url}")
    # dg dev given the module loads it as workspace.yaml does (location pipelines.definitions), from the
    # installed package. In the Dagster home, no other dagster.yaml is in sight to warn about.
    command = [sys.executable, "-m", "dagster_dg_cli.cli", "dev", "-m", CODE_LOCATION, "-p", str(port)]
    try:
        run_group(command, env=env, cwd=home)  # Ctrl-C or SIGTERM stops dg dev and all it started
    finally:
        if server is not None:
            server.stop()
