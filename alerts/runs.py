"""A finished run as the alerts read it from the Dagster instance: its organization, its root cause in one
line, its check evaluations. The same for a run the daemon launched and one `commops sync` ran in process."""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg
from dagster._utils.error import SerializableErrorInfo

PARTITION_TAG = "dagster/partition"
CHECKS_FAILED = "DagsterAssetCheckFailedError"  # what Dagster raises in a step whose blocking check failed
EVERY_ORG = "all"  # the organization named by a run of an unpartitioned job


def run_org(run: dg.DagsterRun) -> str:
    return run.tags.get(PARTITION_TAG) or EVERY_ORG


def root_cause(errors: Iterable[SerializableErrorInfo | None]) -> str | None:
    """The first error's deepest cause, one line, without its class path (`dg.Failure: msg` -> `msg`)."""
    for error in errors:
        while error is not None and error.cause is not None:
            error = error.cause
        if error is not None:
            message = one_line(error.message) or error.cls_name
            qualified, _, rest = message.partition(": ")
            return rest if rest and qualified.split(".")[-1] == error.cls_name else message
    return None


def failure_cause(instance: dg.DagsterInstance, run_id: str) -> str:
    """Why run `run_id` failed, one line: its first failed step's root cause, else the run's own."""
    steps = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    runs = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    errors = [record.dagster_event.step_failure_data.error for record in steps]
    errors += [getattr(record.dagster_event.event_specific_data, "error", None) for record in runs]
    cause = root_cause(errors)
    if cause:
        return cause
    return next((one_line(record.message) for record in runs if record.message), "the run failed (see its logs)")


def failed_by_checks_alone(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether every failed step of run `run_id` failed because a blocking check of its own failed (the
    run failed for nothing else)."""
    steps = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    errors = [record.dagster_event.step_failure_data.error for record in steps]
    return bool(errors) and all(error is not None and error.cls_name == CHECKS_FAILED for error in errors)


def check_evaluations(instance: dg.DagsterInstance, run_id: str) -> list:
    """The run's asset check evaluations (AssetCheckEvaluation), in order."""
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    return [record.dagster_event.event_specific_data for record in records]


def one_line(message: str) -> str:
    """The message's first line; a first line that announces a list (ends with ':', e.g. Dagster's
    "1 blocking asset check failed with ERROR severity:") takes the list along, joined by '; '."""
    lines = [line.strip() for line in (message or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {'; '.join(lines[1:])}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
