"""What the commands that run a job in-process share: the run recorded as the code location's, a
silenced console log, the one-line failure of a failed run, and plain values of materialization metadata."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.execution.api import execute_run
from dagster._core.execution.execute_in_process import merge_run_tags
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from pipelines.definitions import CODE_LOCATION

# Dagster's console log is silenced (a failed step would print a traceback wall); the commands'
# displays, summaries and one-line errors say what happened.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}

RunResult = dg.ExecuteInProcessResult | dg.JobExecutionResult


def execute_in_process(job: dg.JobDefinition, instance: dg.DagsterInstance, run_config: Mapping[str, Any],
                       partition_key: str | None = None) -> dg.JobExecutionResult:
    """`job.execute_in_process(instance=instance, raise_on_error=False, ...)`, the run created with the code
    location's origin of the job. The UI places a run by its origin (the Overview timeline, the job's page),
    and execute_in_process records none: its runs showed on the Runs page alone, a scheduled run's everywhere."""
    ephemeral = job.as_ephemeral_job(resource_defs={}, input_values={})  # what execute_in_process runs
    run = instance.create_run_for_job(
        ephemeral,
        run_config=run_config,
        tags=merge_run_tags(job_def=job, partition_key=partition_key, tags=None, asset_selection=None,
                            instance=instance, run_config=run_config),
        remote_job_origin=_code_location_origin(job.name),
    )
    return execute_run(InMemoryJob(ephemeral), run, instance)


def _code_location_origin(job_name: str) -> RemoteJobOrigin:
    """The job's origin as the workspaces name it (workspace.yaml, deploy/workspace.yaml, [tool.dg.project]):
    location `pipelines.definitions`, its one repository; loaded in this process."""
    location = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name=CODE_LOCATION), location_name=CODE_LOCATION)
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job_name)


def failure_message(result: RunResult) -> str:
    """The root cause of a failed run, one line (the exception's own message, without its class path):
    of the first failed step, else of the run itself (e.g. a resource that could not start)."""
    errors = [event.step_failure_data.error for event in result.get_step_failure_events()]
    failure = result.get_run_failure_event()
    errors.append(getattr(failure.event_specific_data, "error", None) if failure is not None else None)
    for error in errors:
        while error is not None and error.cause is not None:
            error = error.cause
        if error is not None:
            message = _one_line(error.message) or error.cls_name
            qualified, _, rest = message.partition(": ")
            return rest if rest and qualified.split(".")[-1] == error.cls_name else message
    return failure.message if failure is not None else "the run failed (see the Dagster logs)"


def _one_line(message: str) -> str:
    """The message's first line; a first line that announces a list (ends with ':', e.g. Dagster's
    "1 blocking asset check failed with ERROR severity:") takes the list along, joined by '; '."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {'; '.join(lines[1:])}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def metadata_value(metadata: dict[str, Any], key: str) -> Any:
    """The plain value of a metadata entry (None when absent)."""
    entry = metadata.get(key)
    return getattr(entry, "value", entry)
