"""`webhook_events_sensor`: requests `apply_webhook_events` runs for the inbox's pending events.

The inbox's pending state is the truth, not a cursor: each tick takes the pending events (oldest
first) that no in-flight run of the job carries (queued, not started, starting or started: their
`event_ids` are read from the run config), at most BATCH_LIMIT, and requests one run for them.
An event committed late (after a newer one was already requested) is still pending, so the next
tick takes it: no cursor can move past it.

Run keys are derived from the events: `webhook-events-<hash of the ids>-<n>`, n = the runs already
made for that batch (tag `commops/event_batch`). An in-flight batch is never requested again (its
events are excluded); a failed batch, or one whose run crashed (run monitoring turns it into a
failure), is requested again under the next n. The cursor only records the last tick's figures.

Pending means ready: an event waiting after a failure (`retry_after`) or quarantined is not taken.
`webhook_events_failure_sensor` counts a failed run of the job against its events, a crashed one
included (pipelines/event_failures.py).

default_status RUNNING: with the receiver running, events reach analytics.duckdb within seconds
as soon as `dagster dev` or the daemon runs; stop the sensor in the UI to apply them only with
`commops events apply`.
"""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from assets.webhooks import BATCH_LIMIT, event_ids_of, run_config
from pipelines.event_failures import count_failure
from pipelines.jobs import APPLY_WEBHOOK_EVENTS, apply_webhook_events
from resources.inbox import InboxResource

BATCH_TAG = "commops/event_batch"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def batch_hash(event_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(event_ids).encode()).hexdigest()[:16]


def in_flight_event_ids(instance: dg.DagsterInstance) -> set[str]:
    """Event ids carried by runs of the job that have not finished."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=APPLY_WEBHOOK_EVENTS, statuses=IN_FLIGHT))
    return {event_id for run in runs for event_id in event_ids_of(run.run_config)}


def next_request(instance: dg.DagsterInstance, inbox: InboxResource, limit: int = BATCH_LIMIT) -> tuple[dg.RunRequest | None, dict]:
    """The run request for the next batch (None when nothing is pending outside in-flight runs), and figures."""
    carried = in_flight_event_ids(instance)
    with inbox.open() as box:
        # Read past the in-flight events so a full batch is still found behind them.
        pending = box.pending(limit=limit + len(carried))
    batch = [event.id for event in pending if event.id not in carried][:limit]
    figures = {"pending_seen": len(pending), "in_flight": len(carried), "requested": len(batch)}
    if not batch:
        return None, figures
    digest = batch_hash(batch)
    earlier = instance.get_runs_count(filters=dg.RunsFilter(tags={BATCH_TAG: digest}))
    request = dg.RunRequest(
        run_key=f"webhook-events-{digest}-{earlier}",
        run_config=run_config(batch),
        tags={BATCH_TAG: digest, "commops/events": str(len(batch))},
    )
    return request, figures


@dg.sensor(
    name="webhook_events_sensor",
    job_name=APPLY_WEBHOOK_EVENTS,
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests apply_webhook_events for pending inbox events not carried by an in-flight run.",
)
def webhook_events_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    request, figures = next_request(context.instance, inbox)
    cursor = json.dumps(figures, sort_keys=True)  # observability only: the inbox decides what is pending
    if request is None:
        reason = "no pending events" if not figures["in_flight"] else f"{figures['in_flight']} event(s) in flight"
        return dg.SensorResult(skip_reason=reason, cursor=cursor)
    return dg.SensorResult(run_requests=[request], cursor=cursor)


@dg.run_failure_sensor(
    name="webhook_events_failure_sensor",
    monitored_jobs=[apply_webhook_events],
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=f"Counts a failed {APPLY_WEBHOOK_EVENTS} run (a crashed one included) against its events.",
)
def webhook_events_failure_sensor(context: dg.RunFailureSensorContext, inbox: InboxResource) -> None:
    message = (context.failure_event.message or "").strip().splitlines()
    count_failure(inbox, context.dagster_run, f"run failed: {message[0][:400] if message else 'no message'}", context.log)


SENSORS = [webhook_events_sensor, webhook_events_failure_sensor]
