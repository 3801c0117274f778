"""The one place the `commops` command runs a job: in this process, in the CLI's Dagster home (or the
instance it is given), recorded under its job of the code location (so the UI shows it where scheduled
runs show), Dagster's console log silenced. A run comes back as a `JobRun`: whether it
succeeded, its failure in one line, and what its assets reported, read back as typed records
(resources/metadata_record.py) rather than by metadata keys."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.execution.api import execute_run
from dagster._core.execution.execute_in_process import merge_run_tags
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from alerts.runs import one_line as _one_line, root_cause
from commops_cli.dagster_home import dagster_instance
from file_modes import restrict_umask
from pipelines.definitions import CODE_LOCATION, adopt_single_org_layout, make_definitions
from resources.metadata_record import MetadataRecord, plain_values
from resources.settings import Settings

# Dagster's console log is silenced (a failed step would print a traceback wall); the commands'
# displays, summaries and one-line errors say what happened.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}

Record = TypeVar("Record", bound=MetadataRecord)


@dataclass(frozen=True)
class Materialization:
    asset: dg.AssetKey
    metadata: dict[str, Any]  # every entry, as plain values


@dataclass(frozen=True)
class CheckFailure:
    """A check that did not pass: `blocking` ones (ERROR) stop their table's load and fail the run."""

    check: str  # asset:check
    blocking: bool
    description: str  # one line; empty when the check gave none


@dataclass(frozen=True)
class JobRun:
    """A finished run, as the commands read it."""

    run_id: str
    failure: str | None  # the root cause of a failed run, one line; None when it succeeded
    duration_seconds: float
    materializations: list[Materialization]  # in the order they happened
    failed_checks: list[str]  # asset:check of every check that did not pass
    check_failures: list[CheckFailure]  # the same, with whether each blocked and what it said

    @property
    def blocking_failures(self) -> list[CheckFailure]:
        return [failure for failure in self.check_failures if failure.blocking]

    @property
    def success(self) -> bool:
        return self.failure is None

    def output(self, asset: dg.AssetKey, record: type[Record], **given: Any) -> Record | None:
        """The record `asset` reported in this run (`given`: its fields the metadata does not carry);
        None when the asset was not materialized."""
        reported = [m.metadata for m in self.materializations if m.asset == asset]
        return record.from_metadata(reported[-1], **given) if reported else None


@dataclass(frozen=True)
class JobRunner:
    """Where every in-process run of the commands is launched (`run`)."""

    definitions: dg.Definitions
    instance: dg.DagsterInstance

    def run(self, job_name: str, run_config: Mapping[str, Any] | None = None, partition: str | None = None,
            tags: Mapping[str, str] | None = None) -> JobRun:
        """Run the job to its end (a failure is in the JobRun, not raised). `partition`: the key of a
        partitioned job, added to its dynamic partitions when new."""
        job = self.definitions.resolve_job_def(job_name)
        partitions = job.partitions_def
        if (isinstance(partitions, dg.DynamicPartitionsDefinition) and partition is not None
                and not self.instance.has_dynamic_partition(partitions.name, partition)):
            self.instance.add_dynamic_partitions(partitions.name, [partition])
        started = time.monotonic()
        result = execute_in_process(job, self.instance, run_config={**(run_config or {}), **QUIET_CONSOLE},
                                    partition_key=partition, tags=tags)
        failures = [evaluation for evaluation in result.get_asset_check_evaluations() if not evaluation.passed]
        return JobRun(
            run_id=result.run_id,
            failure=None if result.success else failure_message(result),
            duration_seconds=round(time.monotonic() - started, 2),
            materializations=[
                Materialization(event.materialization.asset_key, plain_values(event.materialization.metadata))
                for event in result.get_asset_materialization_events()
            ],
            failed_checks=[f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}" for evaluation in failures],
            check_failures=[
                CheckFailure(f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}",
                             blocking=bool(evaluation.blocking)
                             and evaluation.severity == dg.AssetCheckSeverity.ERROR,
                             description=_one_line(evaluation.description or ""))
                for evaluation in failures
            ],
        )


@contextmanager
def job_runner(settings: Settings, resources: Mapping[str, Any], instance: dg.DagsterInstance | None = None, *,
               marts: bool = True) -> Iterator[JobRunner]:
    """A runner of the code location's jobs (built from `settings` and `resources`; without the marts' dbt
    assets unless `marts`), in `instance`, else in the Dagster home the UI reads (`commops ui`), open for the
    `with` block. As in every process that runs the code location, the umask becomes the project's
    (file_modes), so a job run in process (a test's, a benchmark's) writes owner-only files like `commops`
    does, and a lake from before organizations takes their layout."""
    restrict_umask()
    adopt_single_org_layout(settings)
    definitions = make_definitions(settings, resources, marts=marts)
    with nullcontext(instance) if instance is not None else dagster_instance(settings) as opened:
        yield JobRunner(definitions, opened)


def execute_in_process(job: dg.JobDefinition, instance: dg.DagsterInstance, run_config: Mapping[str, Any],
                       partition_key: str | None = None, tags: Mapping[str, str] | None = None) -> dg.JobExecutionResult:
    """`job.execute_in_process(instance=instance, raise_on_error=False, ...)`, the run created with the code
    location's origin of the job. The UI places a run by its origin (the Overview timeline, the job's page),
    and execute_in_process records none: its runs showed on the Runs page alone, a scheduled run's everywhere."""
    ephemeral = job.as_ephemeral_job(resource_defs={}, input_values={})  # what execute_in_process runs
    run = instance.create_run_for_job(
        ephemeral,
        run_config=run_config,
        tags=merge_run_tags(job_def=job, partition_key=partition_key, tags=tags, asset_selection=job.asset_selection,
                            instance=instance, run_config=run_config),
        asset_selection=job.asset_selection,
        remote_job_origin=_code_location_origin(job.name),
    )
    return execute_run(InMemoryJob(ephemeral), run, instance)


def _code_location_origin(job_name: str) -> RemoteJobOrigin:
    """The job's origin as the workspaces name it (workspace.yaml, deploy/workspace.yaml, [tool.dg.project]):
    location `pipelines.definitions`, its one repository; loaded in this process."""
    location = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name=CODE_LOCATION), location_name=CODE_LOCATION)
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job_name)


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The root cause of a failed run, one line (the exception's own message, without its class path):
    of the first failed step, else of the run itself (e.g. a resource that could not start)."""
    errors = [event.step_failure_data.error for event in result.get_step_failure_events()]
    failure = result.get_run_failure_event()
    errors.append(getattr(failure.event_specific_data, "error", None) if failure is not None else None)
    cause = root_cause(errors)
    if cause:
        return cause
    return failure.message if failure is not None else "the run failed (see the Dagster logs)"
