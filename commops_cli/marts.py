"""`commops marts build` rebuilds the analysts' marts now (the `refresh_marts` job, in-process) and `commops docs`
writes dbt's documentation site of the marts (one self-contained HTML page)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console

from commops_cli.command_checks import fail, writable_data_dir
from resources.settings import SettingsError, load_settings

DOCS_FOLDER = "marts-docs"  # in the data directory


@dataclass(frozen=True)
class MartsBuild:
    swapped_in: bool
    marts: list[str]  # the marts the run built (or tried to)
    failed_checks: list[str]  # asset:check of every check that did not pass (WARN ones included)
    failure: str | None  # the run's failure, one line (None when it ran to its end)

    @property
    def outcome(self) -> str:
        return marts_outcome(self.swapped_in)


def marts_outcome(swapped_in: bool) -> str:
    """What a marts build that ran to its end left analysts, in the words every command prints."""
    return ("built and swapped in" if swapped_in else
            "NOT swapped in (a failed ERROR test or model): analysts keep the last good marts")


def run_marts_build(data_dir: str | os.PathLike[str] | None = None) -> MartsBuild:
    """Run `refresh_marts` in this process: every mart, then analytics.duckdb published."""
    from assets.mart_keys import MART_KEYS, SWAPPED_IN
    from commops_cli.in_process import job_runner
    from pipelines.definitions import build_resources
    from pipelines.jobs import REFRESH_MARTS

    settings = load_settings(data_dir=data_dir)
    with job_runner(settings, build_resources(settings)) as runner:
        run = runner.run(REFRESH_MARTS)
    built = [m for m in run.materializations if m.asset in MART_KEYS]
    return MartsBuild(
        swapped_in=bool(built) and all(m.metadata.get(SWAPPED_IN) for m in built),
        marts=[m.asset.path[-1] for m in built],
        failed_checks=run.failed_checks,
        failure=run.failure,
    )


def build_and_report(command: str, data_dir: str | os.PathLike[str] | None = None) -> MartsBuild:
    """Build the marts and print one line (and the failed checks); exit 1 when the run failed."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        build = run_marts_build(data_dir)
    except SettingsError as error:
        fail(command, str(error))
    if build.failure is not None:
        fail(command, f"the marts build failed: {build.failure}")
    console.print(f"Marts {build.outcome}: {', '.join(build.marts)}")
    for check in build.failed_checks:
        console.print(f"  check failed: {check}")
    return build


@click.group("marts")
def marts() -> None:
    """The analysts' marts (dbt models over the warehouse, published in analytics.duckdb)."""


@marts.command("build")
@click.option("--data-dir", help="Where the warehouse is (default: $COMMOPS_DATA_DIR or ./data).")
def build(data_dir: str | None) -> None:
    """Rebuild every mart from the warehouse now and publish them (the nightly sync does this after its merges,
    and the marts_refresh_sensor after webhook and CRM runs)."""
    build_and_report("marts build", writable_data_dir("marts build", data_dir))


@click.command("docs")
@click.option("--data-dir", help="Where analytics.duckdb is (default: $COMMOPS_DATA_DIR or ./data).")
def docs(data_dir: str | None) -> None:
    """Write dbt's documentation site of the marts (models, columns, tests, lineage) as one HTML file under
    the data directory, from the published marts; open it in a browser."""
    from dagster_dbt.errors import DagsterDbtCliRuntimeError

    from assets.marts import MARTS_PROJECT, dbt_cli
    from resources.environ import variables_set
    from resources.marts import MARTS_FILE, MartsResource, tighten_modes
    from resources.warehouse import ANALYTICS_FILE

    data = Path(writable_data_dir("docs", data_dir))
    published, marts_file = data / ANALYTICS_FILE, data / MARTS_FILE
    if not published.exists() or not marts_file.exists():
        fail("docs", f"no marts in {data} yet: run `commops sync` (or `commops demo`) first")
    target = data / DOCS_FOLDER
    with tempfile.TemporaryDirectory(dir=data) as scratch:
        # dbt reads the relations' columns from a copy of the marts, the sources' from the published copy: it
        # never opens a file the pipeline writes.
        copy = Path(scratch) / MARTS_FILE
        shutil.copyfile(marts_file, copy)
        environment = MartsResource(data_dir=str(data)).dbt_environment(published, in_data_dir=False)
        environment["COMMOPS_MARTS_BUILD_PATH"] = str(copy)
        try:
            # dbt's log: in marts-docs/dbt.log
            with contextlib.redirect_stdout(io.StringIO()), variables_set(environment):
                dbt_cli(MARTS_PROJECT).cli(["docs", "generate", "--static", "--target", "pipeline"],
                                           target_path=target).wait()
        except DagsterDbtCliRuntimeError as error:
            fail("docs", f"dbt docs generate failed: {str(error).splitlines()[0]}")
    tighten_modes(target)
    page = target / "static_index.html"
    click.echo(f"The marts' documentation: {page} (open it in a browser; `python -m http.server -d {target}` serves "
               f"index.html with catalog.json beside it)")
