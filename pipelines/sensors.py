"""`webhook_events_sensor`: requests `apply_webhook_events` runs for the inbox's pending events.

The inbox's pending state is the truth, not a cursor: each tick takes the pending events (oldest
first) that no in-flight run of the job carries (queued, not started, starting or started: their
`event_ids` are read from the run config), at most BATCH_LIMIT per organization, and requests one run
per organization (its partition of the job); events of no registered organization are quarantined.
An event committed late (after a newer one was already requested) is still pending, so the next
tick takes it: no cursor can move past it.

Run keys are derived from the events: `webhook-events-<hash of the ids>-<n>`, n = the runs already
made for that batch (tag `commops/event_batch`). An in-flight batch is never requested again (its
events are excluded); a failed batch, or one whose run crashed (run monitoring turns it into a
failure), is requested again under the next n. The cursor only records the last tick's figures.

Pending means ready: an event waiting after a failure (`retry_after`) or quarantined is not taken.
`webhook_events_failure_sensor` counts a failed run of the job against its events, a crashed one
included (pipelines/hooks.py).

The sensor stands down while `commops events follow` runs (pipelines/follower_lease.py): the follower applies
events as they arrive, in its own process; when its beat stops, the sensor fails the runs it left
unfinished and takes over.

default_status RUNNING: with the receiver running, events reach analytics.duckdb within seconds
as soon as `dagster dev` or the daemon runs; stop the sensor in the UI to apply them only with
`commops events apply`.
"""

from __future__ import annotations

import hashlib
import json
import time

import dagster as dg

from alerts.alerter import opened_alerter
from alerts.status import TABLES
from alerts.watch import review_follower, review_freshness, review_inbox, review_run
from assets.partitions import ORGS
from assets.webhooks import APPLY_STEP, event_ids_of, run_config
from pipelines.follower_lease import Watch, fail_runs_of_gone_followers, read_beat, write_beat
from webhooks.organizations import route_events, unknown_organization
from webhooks.routing import BATCH_LIMIT
from pipelines.hooks import count_failure
from pipelines.jobs import APPLY_WEBHOOK_EVENTS, apply_webhook_events
from resources.webhooks import InboxResource
from resources.orgs import Org
from resources.orgs_resource import OrgsResource
from resources.settings import load_settings

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


def next_requests(
    instance: dg.DagsterInstance, inbox: InboxResource, orgs: list[Org], limit: int = BATCH_LIMIT
) -> tuple[list[dg.RunRequest], dict]:
    """One run request per organization with events pending outside in-flight runs (its oldest, at most
    `limit`), and figures. Events of no known organization are quarantined, never applied to another."""
    carried = in_flight_event_ids(instance)
    with inbox.open() as box:
        # Read past the in-flight events so a full batch per organization is still found behind them.
        pending = box.pending(limit=limit * max(len(orgs), 1) + len(carried))
        routed, unknown = route_events([event for event in pending if event.id not in carried], orgs)
        for event in unknown:
            box.quarantine([event.id], unknown_organization(event))
    requests = []
    for org, events in sorted(routed.items()):
        batch = [event.id for event in events][:limit]
        digest = batch_hash(batch)
        earlier = instance.get_runs_count(filters=dg.RunsFilter(tags={BATCH_TAG: digest}))
        requests.append(dg.RunRequest(
            run_key=f"webhook-events-{org}-{digest}-{earlier}",
            partition_key=org,
            run_config=run_config(batch),
            tags={BATCH_TAG: digest, "commops/events": str(len(batch))},
        ))
    figures = {"pending_seen": len(pending), "in_flight": len(carried), "requested": sum(
        len(r.run_config["ops"][APPLY_STEP]["config"]["event_ids"]) for r in requests), "unknown_organization": len(unknown)}
    return requests, figures


def partitions_to_add(instance: dg.DagsterInstance, names: list[str]) -> list[dg.AddDynamicPartitionsRequest]:
    """The request adding the organizations that are not partitions yet (none when all are)."""
    missing = [name for name in names if not instance.has_dynamic_partition(ORGS.name, name)]
    return [ORGS.build_add_request(missing)] if missing else []


@dg.sensor(
    name="webhook_events_sensor",
    job_name=APPLY_WEBHOOK_EVENTS,
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests apply_webhook_events per organization for pending inbox events not carried by an "
    "in-flight run; quarantines events of no registered organization.",
)
def webhook_events_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource, orgs: OrgsResource) -> dg.SensorResult:
    previous = json.loads(context.cursor) if context.cursor else {}
    beat = read_beat(context.instance)
    watched = Watch.from_dict(previous.get("follower"))
    following, watch = watched.observe(beat, time.time())
    if following:
        if watched.token is None:  # a follower at work again: its incident, if one is open, is resolved
            _review_follower(inbox, beat.follower, alive=True)
        return dg.SensorResult(skip_reason=f"the events follower {beat.follower} applies them (commops events follow)",
                               cursor=json.dumps({"follower": watch.as_dict()}, sort_keys=True))
    if beat is not None:  # once: the beat is cleared, and comes back only if the follower does
        failed = fail_runs_of_gone_followers(context.instance, APPLY_WEBHOOK_EVENTS, live=None)
        write_beat(context.instance, None)
        watch = Watch()
        context.log.warning(f"the events follower {beat.follower} stopped beating: the sensor applies the events"
                            + (f"; {len(failed)} run(s) it left unfinished marked failed" if failed else ""))
        _review_follower(inbox, beat.follower, alive=False, runs_failed=len(failed))
    known = orgs.all()
    requests, figures = next_requests(context.instance, inbox, known)
    # observability only: the inbox decides what is pending
    cursor = json.dumps({**figures, "follower": watch.as_dict()}, sort_keys=True)
    if not requests:
        reason = "no pending events" if not figures["in_flight"] else f"{figures['in_flight']} event(s) in flight"
        return dg.SensorResult(skip_reason=reason, cursor=cursor)
    return dg.SensorResult(
        run_requests=requests,
        cursor=cursor,
        dynamic_partitions_requests=partitions_to_add(context.instance, [r.partition_key for r in requests]),
    )


@dg.sensor(
    name="orgs_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keeps the `orgs` partitions equal to the registered organizations (commops orgs; the "
    "environment's default organization included).",
)
def orgs_sensor(context: dg.SensorEvaluationContext, orgs: OrgsResource) -> dg.SensorResult:
    wanted = [org.name for org in orgs.all()]
    current = context.instance.get_dynamic_partitions(ORGS.name)
    removed = [name for name in current if name not in wanted]
    requests = partitions_to_add(context.instance, wanted)
    if removed:
        requests.append(ORGS.build_delete_request(removed))
    if not requests:
        return dg.SensorResult(skip_reason=f"{len(wanted)} organization(s), partitions up to date")
    return dg.SensorResult(dynamic_partitions_requests=requests)


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


def _review_follower(inbox: InboxResource, follower: str, **state) -> None:
    with opened_alerter(inbox.location) as alerter:
        review_follower(alerter, follower, **state)
        alerter.deliver()


def _review(context: dg.RunStatusSensorContext, inbox: InboxResource) -> None:
    with opened_alerter(inbox.location) as alerter:
        review_run(context.instance, context.dagster_run, alerter)
        alerter.deliver()


@dg.run_failure_sensor(
    name="alerts_run_failure_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Alerts on a failed run of any job, and on its failed blocking checks, once per incident "
    "(the store `commops sync` shares: docs/operators.md).",
)
def alerts_run_failure_sensor(context: dg.RunFailureSensorContext, inbox: InboxResource) -> None:
    _review(context, inbox)


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    name="alerts_run_success_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Sends the recovery notice of an open incident when the next run of its job succeeds, "
    "or its check passes.",
)
def alerts_run_success_sensor(context: dg.RunStatusSensorContext, inbox: InboxResource) -> None:
    _review(context, inbox)


@dg.sensor(
    name="alerts_sensor",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Alerts on quarantined webhook events, an aged inbox backlog and a missed freshness deadline, per "
    "organization, once per incident; delivers alerts a channel failed to take earlier.",
)
def alerts_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource, orgs: OrgsResource) -> dg.SkipReason:
    known = orgs.all()
    with opened_alerter(inbox.location) as alerter:
        with inbox.open() as box:
            review_inbox(box, known, alerter)
        review_freshness(context.instance, known, TABLES, load_settings().timezone, alerter)
        delivered, owed = alerter.deliver()
        open_now = len(alerter.store.open_incidents())
    return dg.SkipReason(f"{open_now} open incident(s); {delivered} message(s) delivered, {owed} still owed")


SENSORS = [webhook_events_sensor, webhook_events_failure_sensor, orgs_sensor, alerts_run_failure_sensor,
           alerts_run_success_sensor, alerts_sensor]
