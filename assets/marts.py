"""The analysts' marts: the dbt project in marts/ as Dagster assets (dagster-dbt).

Every dbt model is an asset (`marts/<model>`, staging views `marts/staging/<model>`) downstream of the
warehouse tables its sources name (marts/models/sources.yml), and every dbt data test an asset check. The
build runs under the warehouse's writer lock, reading the warehouse attached read-only, into a copy of the last
good marts (resources/marts.py); the copy is swapped in only when dbt reports no ERROR (its ERROR tests
passed, every model built). A failed build leaves the last good marts to `analytics`, which publishes the raw
tables either way: so the checks do not block in Dagster's sense (that would skip `analytics`), the swap is
the gate, and every model of the step reports a materialization saying whether it was swapped in.
"""


import contextlib
import importlib.metadata
import io
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DagsterDbtTranslatorSettings, DbtProject, dbt_assets

from assets.dbt_in_process import InProcessDbtCli
from assets.mart_keys import MART_KEYS, MARTS_GROUP, MARTS_PROJECT_DIR, STAGING_KEYS, SWAPPED_IN

from resources.files import holding_lock
from resources.environ import environment_with, variables_set
from resources.marts import BUILD_ARGS, MartsResource
from resources.warehouse import WarehouseResource

DBT_EXECUTABLE = str(Path(sys.executable).with_name("dbt"))  # the venv's, whatever PATH says


def marts_project() -> DbtProject:
    """The dbt project, its manifest parsed when missing or older than a file of the project (so every
    process that loads the code location, `commops` and the tests included, finds one that matches)."""
    project = DbtProject(project_dir=MARTS_PROJECT_DIR, profiles_dir=MARTS_PROJECT_DIR)
    if _manifest_is_stale(project):
        with holding_lock(project.manifest_path.with_name(".parse.lock"), on_wait=lambda holder: None):
            if _manifest_is_stale(project):  # another process may have parsed it while this one waited
                _parse(project)
    return project


def _parse(project: DbtProject) -> None:
    """`dbt parse` for the `pipeline` target, as the builds run it (so each build's dbt reuses this parse,
    whatever its data directory), its output kept off the commands' terminal; a failure raised in one line."""
    with tempfile.TemporaryDirectory() as scratch:
        marts = MartsResource(data_dir=scratch)
        layout = marts.dbt_environment(marts.source_path)  # all unset
        done = subprocess.run([DBT_EXECUTABLE, "parse", "--quiet", "--target", "pipeline",
                               "--project-dir", str(project.project_dir), "--profiles-dir", str(project.profiles_dir),
                               "--target-path", str(project.manifest_path.parent)],
                              capture_output=True, text=True,
                              env={**environment_with(layout), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"})
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise RuntimeError(f"dbt could not parse the marts project {project.project_dir}: "
                           f"{lines[-1] if lines else 'exit ' + str(done.returncode)}")


class MartsDbtCli(InProcessDbtCli):
    """dagster-dbt's dbt resource, the build run in the step's process (assets/dbt_in_process.py), without two
    start-up costs dagster-dbt pays on every run, each a dbt start of its own: `dbt --version` in a subprocess
    (the venv's dbt is the pinned dbt-core: its version is the package's), and a dbt adapter in this process,
    which serves only row-count and column-metadata fetches the marts do not make."""

    @cached_property
    def _cli_version(self):  # type: ignore[override]
        from packaging import version

        return version.parse(importlib.metadata.version("dbt-core"))

    def _initialize_dbt_core_adapter(self, args):  # type: ignore[override]
        return None


def dbt_cli(project: DbtProject) -> MartsDbtCli:
    return MartsDbtCli(project_dir=project, dbt_executable=DBT_EXECUTABLE)


def _manifest_is_stale(project: DbtProject) -> bool:
    if not project.manifest_path.exists():
        return True
    parsed = project.manifest_path.stat().st_mtime
    sources = [p for folder in ("models", "macros", "tests") for p in (project.project_dir / folder).rglob("*")]
    sources += [project.project_dir / "dbt_project.yml", project.project_dir / "profiles.yml"]
    return any(p.is_file() and p.stat().st_mtime > parsed for p in sources)


class MartsTranslator(DagsterDbtTranslator):
    """Models under `marts/` (staging views under `marts/staging/`), in the `marts` group; sources keep the
    asset keys their meta names (the warehouse tables). dbt's ERROR tests stay ERROR checks but do not block
    (see the module's docstring)."""

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> dg.AssetKey:
        if dbt_resource_props["resource_type"] == "source":
            return super().get_asset_key(dbt_resource_props)
        name = dbt_resource_props["name"]
        return dg.AssetKey(["marts", "staging", name] if name.startswith("stg_") else ["marts", name])

    def get_metadata(self, dbt_resource_props: Mapping[str, Any]) -> Mapping[str, Any]:
        """dbt's metadata, the table named where analysts read it (the marts in analytics.duckdb; the staging views
        only in the build file)."""
        metadata = dict(super().get_metadata(dbt_resource_props))
        if dbt_resource_props["resource_type"] == "model":
            name = dbt_resource_props["name"]
            metadata["dagster/table_name"] = f"marts.main.{name}" if name.startswith("stg_") else f"analytics.main.{name}"
        return metadata

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return MARTS_GROUP

    def get_asset_check_spec(self, asset_spec, manifest, unique_id, project) -> dg.AssetCheckSpec | None:
        spec = super().get_asset_check_spec(asset_spec, manifest, unique_id, project)
        return None if spec is None else spec._replace(blocking=False)


MARTS_PROJECT = marts_project()


@dbt_assets(
    manifest=MARTS_PROJECT.manifest_path,
    project=MARTS_PROJECT,
    # Code references: the UI links each model to its SQL file.
    dagster_dbt_translator=MartsTranslator(DagsterDbtTranslatorSettings(enable_code_references=True)),
    name="marts",
    pool="warehouse",
)
def marts(context: dg.AssetExecutionContext, dbt: MartsDbtCli, marts: MartsResource,
          warehouse: WarehouseResource) -> Iterator[Any]:
    with marts.changing(context.log):
        marts.start_build()
        with warehouse.locked(context.log):  # for the copy only: the warehouse's writers go on while dbt builds
            source = marts.copy_source(warehouse.path)
        try:
            with variables_set(marts.dbt_environment(source)):
                # dbt's logs and compiled SQL in the data directory, one folder reused (its partial parse saves the
                # start-up).
                invocation = dbt.invoke(list(BUILD_ARGS), context=context, target_path=marts.dbt_target_path,
                                        working_dir=Path(marts.data_dir))
            # dagster-dbt echoes dbt's log to stdout: kept off the commands' terminal; its summary goes to the
            # run's log.
            with contextlib.redirect_stdout(io.StringIO()) as echoed:
                events = list(invocation.stream())
        finally:
            marts.discard_source()
        marts.tighten()
        summary = _summary(echoed.getvalue())
        swapped_in = invocation.is_successful()
        if swapped_in:
            marts.swap_in()
            context.log.info(f"marts built and swapped in ({marts.path}): {summary}")
        else:
            marts.discard()
            context.log.error(f"marts not swapped in: {summary}. Analysts keep the last good marts; the raw tables "
                              f"publish. dbt's log: {marts.dbt_target_path / 'dbt.log'}")
    yield from _reported(context, events, swapped_in)


def _summary(log: str) -> str:
    """dbt's closing line (`Done. PASS=.. WARN=.. ERROR=..`) and the failures it lists, one line."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in log.splitlines()]
    lines = [line for line in lines if line]
    failures = [line for line in lines if line.startswith(("Failure in", "Error in", "Database Error", "Compilation Error"))]
    done = next((line for line in reversed(lines) if line.startswith("Done.")), None)
    if done is None:  # dbt stopped before its nodes (a project or profile error): the lines after it say why
        said = [i for i, line in enumerate(lines) if line.startswith("Encountered an error")]
        done = " ".join(lines[said[-1] + 1:said[-1] + 3]) if said else (lines[-1] if lines else "dbt said nothing")
    return "; ".join([done, *failures[:10]])


def _reported(context: dg.AssetExecutionContext, events: list[Any], swapped_in: bool) -> Iterator[Any]:
    """dbt's events, each model's materialization saying whether the build was swapped in; a selected model
    dbt did not build (it failed, or was skipped after a failure) reports one too, not built, so `analytics`
    still runs: it publishes the last good marts."""
    built = set()
    for event in events:
        if isinstance(event, dg.Output):
            built.add(context.assets_def.keys_by_output_name[event.output_name])
            yield event.with_metadata({**event.metadata, SWAPPED_IN: swapped_in})
        else:
            yield event
    for key in sorted(context.selected_asset_keys - built, key=lambda k: k.path):
        yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_key(key),
                        metadata={SWAPPED_IN: False, "built": False})


if set(marts.keys) != {*MART_KEYS, *STAGING_KEYS}:
    raise RuntimeError(f"the marts' dbt assets ({sorted(k.to_user_string() for k in marts.keys)}) are not the "
                       f"models assets/mart_keys.py reads from {MARTS_PROJECT_DIR / 'models'}: each model must be "
                       f"one .sql file under models/marts or models/staging")
