"""dbt run in the Dagster step's own process, its events read by dagster-dbt as if from a dbt subprocess.

dagster-dbt starts dbt as a subprocess. A dbt process spends about 4 s importing dbt-core and its adapter before
its first model, and the code location has already imported most of that (dagster-dbt imports dbt's own
modules). `InProcessDbtCli.invoke` runs the same command through dbt's programmatic entry point (`dbtRunner`,
https://docs.getdbt.com/reference/programmatic-invocations), collects dbt's structured events as the JSON lines
a subprocess would print, and hands them to dagster-dbt's `DbtCliInvocation`: the asset events, checks, errors
and subset selection are dagster-dbt's own.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DbtCliResource
from dagster_dbt.asset_utils import (
    DBT_INDIRECT_SELECTION_ENV,
    extract_runtime_selection_from_args,
    get_updated_cli_invocation_params_for_context,
)
from dagster_dbt.core.dbt_cli_invocation import PARTIAL_PARSE_FILE_NAME, DbtCliInvocation

from resources.environ import variables_set


class FinishedDbt:
    """What `DbtCliInvocation` reads of its dbt process, for a dbt that already ran: its command, its JSON log
    lines as stdout, its exit code."""

    def __init__(self, args: Sequence[str], lines: list[str], returncode: int) -> None:
        self.args = list(args)
        self.stdout = io.BytesIO("\n".join(lines).encode())
        self.returncode = returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Nothing to signal: an interrupt reaches dbt in this process, which cancels its queries."""


class InProcessDbtCli(DbtCliResource):
    """dagster-dbt's dbt resource, with `invoke`: a dbt command run in this process."""

    def invoke(self, args: Sequence[str], *, context: dg.AssetExecutionContext, target_path: Path,
               working_dir: Path) -> DbtCliInvocation:
        """Run `args` (as for `cli`) in this process (`run_dbt`), in `working_dir`, where the profile's relative paths
        lead; returns the finished invocation, whose `stream()` yields dagster-dbt's events."""
        cleaned, selects, excludes = extract_runtime_selection_from_args(args)
        params = get_updated_cli_invocation_params_for_context(
            context=context, manifest={}, dagster_dbt_translator=DagsterDbtTranslator(), runtime_selects=selects,
            runtime_excludes=excludes)
        # Absolute, since dbt runs in `working_dir`.
        project_dir = Path(params.dbt_project.project_dir if params.dbt_project else self.project_dir).resolve()
        target_path = target_path.resolve()
        profiles_dir = Path(self.profiles_dir).resolve() if self.profiles_dir else None
        command = [*self.global_config_flags, *cleaned, *params.selection_args]
        _reuse_partial_parse(project_dir, target_path)
        variables = {"DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DBT_TARGET_PATH": os.fspath(target_path),
                     "DBT_LOG_PATH": os.fspath(target_path), "DBT_PROJECT_DIR": os.fspath(project_dir),
                     **({"DBT_PROFILES_DIR": os.fspath(profiles_dir)} if profiles_dir else {}),
                     **({DBT_INDIRECT_SELECTION_ENV: params.indirect_selection} if params.indirect_selection else {})}
        result, lines = run_dbt(command, variables, working_dir)
        return DbtCliInvocation(
            process=FinishedDbt(["dbt", *command], lines, 0 if result.success else 1),  # type: ignore[arg-type]
            manifest=params.manifest, dagster_dbt_translator=params.dagster_dbt_translator, project_dir=project_dir,
            target_path=target_path, raise_on_error=False, context=context, adapter=None,
            cli_version=self._cli_version, project=params.dbt_project)


def run_dbt(command: Sequence[str], variables: dict[str, str], working_dir: Path) -> tuple[Any, list[str]]:
    """One dbt command in this process, in `working_dir`, with these environment variables: dbt's result and its
    JSON log lines at a subprocess's default level (info and above), an error that ended it before any event said
    so included.
    An interrupt (Ctrl-C, a deadline, a run's termination) stops dbt, which cancels its queries, and is raised."""
    from dbt.cli.main import dbtRunner
    from dbt_common.events.functions import msg_to_json

    lines: list[str] = []
    errors = 0

    def collect(message) -> None:
        nonlocal errors
        if message.info.level != "debug":
            lines.append(msg_to_json(message))
            errors += message.info.level == "error"

    with variables_set(variables), contextlib.chdir(working_dir):
        try:
            result = dbtRunner(callbacks=[collect]).invoke([*command, "--log-level", "none", "--log-level-file", "debug"])
        finally:
            _close_duckdb()
    if result.exception is not None and not isinstance(result.exception, Exception):
        raise result.exception
    if result.exception is not None and not errors:
        lines.append(_error_line(result.exception))
    return result, lines


def _reuse_partial_parse(project_dir: Path, target_path: Path) -> None:
    """The project's partial parse file copied to a new target folder, as dagster-dbt does for its subprocess."""
    parsed = project_dir / "target" / PARTIAL_PARSE_FILE_NAME
    copy = target_path / PARTIAL_PARSE_FILE_NAME
    if parsed.exists() and not copy.exists():
        target_path.mkdir(parents=True, exist_ok=True)
        shutil.copy(parsed, copy)


def _close_duckdb() -> None:
    """dbt-duckdb keeps its DuckDB instance (the build file, the warehouse attached) open in the process after the
    command: closed, so the build file can be swapped in and the warehouse's next writer is alone."""
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    with DuckDBConnectionManager._LOCK:
        environment, DuckDBConnectionManager._ENV = DuckDBConnectionManager._ENV, None
        if environment is not None:
            environment.close()


def _error_line(error: Exception) -> str:
    """A dbt error that ended the command before any event said it, as the JSON line dbt logs an error with."""
    return json.dumps({"info": {"level": "error", "name": "MainEncounteredError", "msg": str(error).strip()},
                       "data": {}})
