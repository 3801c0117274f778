"""`commops demo` and `commops ui`: the product on the embedded local service, no set-up needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
from rich.console import Console

from resources import settings

REPO_ROOT = Path(__file__).resolve().parent.parent


@click.command("demo")
@click.option("--data-dir", help="Where everything goes (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--kols", default=200, show_default=True, help="KOLs to seed on the first run.")
def demo(data_dir: str | None, kols: int) -> None:
    """Seed and start the local service, run the full nightly sync against it, show where the data is."""
    from pipelines.local_service import ensure_seeded, start_local_service
    from pipelines.sync_command import run_and_report

    console = Console(width=None if sys.stdout.isatty() else 160)
    data = settings.data_dir(data_dir)
    db_path, credentials = ensure_seeded(data, kols=kols, echo=console.print)
    server = start_local_service(db_path)
    console.print(f"Local service: {server.base_url} (database {db_path})")
    os.environ[settings.API_KEY_ENV] = credentials.api_key  # read by the API resource as a dg.EnvVar
    try:
        run_and_report("demo", base_url=server.base_url, data_dir=data, progress=sys.stderr.isatty())
    finally:
        server.stop()


@click.command("ui")
@click.option("--data-dir", help="Where everything goes (default: $COMMOPS_DATA_DIR or ./data).")
@click.option("--port", default=3000, show_default=True, help="Port of the Dagster UI.")
@click.option("--service-port", default=8000, show_default=True, help="Port of the local service (when used).")
def ui(data_dir: str | None, port: int, service_port: int) -> None:
    """Start the Dagster UI (dagster dev) with schedules and sensors live.

    Without COMMOPS_BASE_URL, the seeded local service is started and used as the source.
    Dagster's home is $COMMOPS_DATA_DIR/dagster_home, configured by the repo's dagster.yaml.
    """
    data = settings.data_dir(data_dir)
    env = dict(os.environ, COMMOPS_DATA_DIR=str(data))
    server = None
    if not os.environ.get(settings.BASE_URL_ENV):
        from pipelines.local_service import ensure_seeded, start_local_service

        db_path, credentials = ensure_seeded(data, echo=click.echo)
        server = start_local_service(db_path, port=service_port)
        env[settings.BASE_URL_ENV] = server.base_url
        env[settings.API_KEY_ENV] = credentials.api_key
        click.echo(f"Local service: {server.base_url}")
    home = data / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    env["DAGSTER_HOME"] = str(home)
    command = [sys.executable, "-m", "dagster", "dev", "-w", str(REPO_ROOT / "workspace.yaml"), "-p", str(port)]
    try:
        subprocess.run(command, env=env, cwd=REPO_ROOT, check=False)
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.stop()
