"""What the commands that run a job in-process share: a silenced console log, the one-line failure
of a failed run, and plain values of materialization metadata."""

from __future__ import annotations

from typing import Any

import dagster as dg

# Dagster's console log is silenced (a failed step would print a traceback wall); the commands'
# displays, summaries and one-line errors say what happened.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def failure_message(result: dg.ExecuteInProcessResult) -> str:
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
