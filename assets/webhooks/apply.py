"""`warehouse/webhook_events`: a batch of inbox events applied to the warehouse, none blocking the rest.

Each event is parsed once (routing), what it names is refetched (refetch), and the batch is merged
in one writer session (write). Every event of the batch is then settled:
- applied: its changes are merged; its `webhook_events` row says `applied` (the inbox marks it
  after the publish, in `webhooks/applied`);
- quarantined at once when it can never be applied (not an envelope, a kol.* event naming no KOL);
- failed alone when the refetch of a KOL it names got an answer about that KOL only: attempts + 1,
  a wait before the next try, quarantined at COMMOPS_EVENTS_MAX_ATTEMPTS.
A quarantined event's row says `quarantined`, with its error. The inbox is updated after the
warehouse commit, so an event the inbox sets aside always has its row. Failures of the batch as a
whole (the API down after retries, the warehouse, the publish) raise: the job's failure hook counts
them for every event of the run (pipelines/hooks.py).
"""


import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg
from pydantic import Field

from sync.catalog import WEBHOOK_EVENTS
from assets.metadata import catalog_reference, column_schema
from webhooks.refetch import Fetched, fetch_current_state
from webhooks.routing import BATCH_LIMIT, plan_batch
from webhooks.settle import event_rows, set_aside_rows, settle
from webhooks.write import unrecorded_quarantine, write
from resources.api import CommopsApiResource
from resources.metadata_record import ROW_COUNT, MetadataRecord, reported_as
from assets.partitions import ORGS, partition_org
from webhooks.organizations import route_events
from resources.webhooks import InboxResource
from resources.orgs import Org
from resources.orgs_resource import OrgsResource
from resources.warehouse import WarehouseResource
from resources.inbox import InboxEvent

WEBHOOK_EVENTS_KEY = dg.AssetKey(["warehouse", "webhook_events"])
APPLY_STEP = "warehouse__webhook_events"  # the op of the apply asset (run config: ops.<step>.config)
QUARANTINE_CHECK = "no_quarantined_events"
_LISTED = 20  # quarantined events named in the check and the metadata


@dataclass(frozen=True)
class ApplyResult(MetadataRecord):
    """What a run did with its batch: its asset's materialization metadata (besides its requests), which
    `commops events apply` adds up."""

    rows: int = reported_as(ROW_COUNT)  # the organization's webhook_events rows
    events: int  # in the batch
    applied: int
    quarantined: int
    quarantined_ids: list[str]
    failed_pending: int  # failed alone, waiting for their next attempt
    inbox_quarantined: int  # every organization's, after the run
    unreadable_values: dict[str, int]
    events_by_kind: dict[str, int]
    rows_written: dict[str, int]  # by table
    kols_refetched: int
    kols_not_found: list[str]
    signals_published_after: str
    duration_seconds: float


class WebhookEventsConfig(dg.Config):
    event_ids: list[str] = Field(
        default=[],
        description="Inbox event ids to apply (the sensor and `commops events apply` set them; the job's failure "
        "hook counts failures for them); empty: the pending events, oldest first, at most `limit`.",
    )
    limit: int = Field(default=BATCH_LIMIT, ge=1, description="Events per run at most when event_ids is empty.")


def run_config(event_ids: list[str]) -> dict:
    """The run config of an apply_webhook_events run for these events."""
    return {"ops": {APPLY_STEP: {"config": {"event_ids": list(event_ids)}}}}


def event_ids_of(config: Mapping | None) -> list[str]:
    """The event ids a run was given (its run config); [] for a run launched without them."""
    return list(((config or {}).get("ops", {}).get(APPLY_STEP, {}).get("config", {}).get("event_ids")) or [])


def claim_batch(inbox: InboxResource, config: WebhookEventsConfig, org: str, orgs: list[Org], run_id: str) -> list[InboxEvent]:
    """The run's events, claimed for it: those it was given, or the pending events of its organization
    (at most `limit`), less any applied, quarantined or held by another run meanwhile."""
    with inbox.open() as box:
        if config.event_ids:
            wanted = config.event_ids
        else:
            pending = box.pending(limit=config.limit * max(len(orgs), 1))
            wanted = [event.id for event in route_events(pending, orgs)[0].get(org, [])[: config.limit]]
        return box.claim(wanted, run_id)


@dg.asset(
    key=WEBHOOK_EVENTS_KEY,
    partitions_def=ORGS,
    group_name="webhooks",
    kinds={"duckdb"},
    pool="warehouse",
    description=(
        "Applies pending webhook events: refetches the KOLs, campaigns and signals they name through the API, "
        "merges them (and campaign_engagement, webhook_events) into the warehouse in one writer session; "
        "events that can never be applied, or fail too often, are quarantined."
    ),
    metadata={
        "table": WEBHOOK_EVENTS.table,
        **column_schema(WEBHOOK_EVENTS.schema, warehouse=True),
        **catalog_reference(WEBHOOK_EVENTS),
    },
    check_specs=[
        dg.AssetCheckSpec(
            QUARANTINE_CHECK,
            asset=WEBHOOK_EVENTS_KEY,
            description="The inbox holds no quarantined event (warns, naming them: see `commops events status`)",
        )
    ],
)
def webhook_events(
    context: dg.AssetExecutionContext,
    config: WebhookEventsConfig,
    api: CommopsApiResource,
    orgs: OrgsResource,
    inbox: InboxResource,
    warehouse: WarehouseResource,
):
    started = time.monotonic()
    run_id = context.run.run_id
    org = partition_org(context)
    known = orgs.all()
    events = claim_batch(inbox, config, org, known, run_id)
    with inbox.open() as box:
        set_aside = route_events(box.quarantined(limit=BATCH_LIMIT), known)[0].get(org, [])
    skipped = len(set(config.event_ids) - {e.id for e in events})
    if skipped:
        context.log.info(f"{skipped} requested event(s) already applied, quarantined, held by another run or "
                         "unknown, skipped")
    client = api.client_for(orgs.get(org))
    before = client.stats
    plan = plan_batch(events)
    fetched = fetch_current_state(client, plan, warehouse, org, context.log) if plan.parsed else Fetched()
    settled = settle(plan, fetched, inbox.max_attempts)

    rows = event_rows(events, plan, settled, run_id)
    engagement = [p.engagement for p in settled.applied if p.engagement is not None]
    with warehouse.writer(context.log, track=True) as session:  # the publish may copy only what it touched
        rows, engagement = _still_held(inbox, run_id, events, rows, engagement, context.log)
        rows += set_aside_rows(unrecorded_quarantine(session, set_aside, org), run_id)
        unreadable: Counter[str] = Counter({"event data": plan.unreadable} if plan.unreadable else {})
        written = write(session, org, fetched, engagement, rows, unreadable)
        counts = {table: session.count(table, org) for table in written}

    with inbox.open() as box:  # after the commit: an event set aside always has its row
        for error, ids in _by_error(plan.never_applicable).items():
            box.quarantine(ids, error, claimer=run_id)
        for error, ids in _by_error(settled.failed).items():
            box.mark_failed(ids, error, run_id=run_id)
        inbox_counts = box.counts()
        listed = box.quarantined(limit=_LISTED)

    _log_table_materializations(context, org, written, counts)
    kinds = ", ".join(f"{name} {n}" for name, n in sorted(plan.kinds.items())) or "none"
    context.log.info(
        f"webhook events: {len(settled.applied)} applied, {len(settled.quarantined)} quarantined, "
        f"{len(settled.waiting)} failed and waiting, of {len(events)} ({kinds}); rows written {written}"
    )
    for event_id, error in settled.quarantined.items():
        context.log.warning(f"quarantined {event_id}: {error}")
    result = ApplyResult(
        rows=counts.get(WEBHOOK_EVENTS.table, 0),
        events=len(events),
        applied=len(settled.applied),
        quarantined=len(settled.quarantined),
        quarantined_ids=sorted(settled.quarantined),
        failed_pending=len(settled.waiting),
        inbox_quarantined=inbox_counts["quarantined"],
        unreadable_values=dict(unreadable.most_common()),
        events_by_kind=dict(sorted(plan.kinds.items())),
        rows_written=written,
        kols_refetched=len(fetched.kols),
        kols_not_found=fetched.kols_not_found,
        signals_published_after=fetched.signals_since or "",
        duration_seconds=time.monotonic() - started,
    )
    yield dg.MaterializeResult(metadata={**result.as_metadata(), **(client.stats - before).as_metadata()})
    yield _quarantine_check(inbox_counts["quarantined"], listed)


def _still_held(inbox: InboxResource, run_id: str, events: list[InboxEvent], rows: list[dict], engagement: list[dict],
                log) -> tuple[list[dict], list[dict]]:
    """The rows and engagement of the events this run still holds, its claims renewed: taken once the
    writer lock is held, so a run that waited past its lease never writes an event another run took."""
    if not events:
        return rows, engagement
    with inbox.open() as box:
        held = {event.id for event in box.claim([event.id for event in events], run_id)}
    lost = [event.id for event in events if event.id not in held]
    if lost:
        log.warning(f"{len(lost)} event(s) taken by another run after this run's claim lapsed, left to it: {', '.join(lost[:20])}")
    return [r for r in rows if r["id"] in held], [e for e in engagement if e["event_id"] in held]


def _by_error(errors: dict[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for event_id, error in errors.items():
        grouped[error].append(event_id)
    return grouped


def _log_table_materializations(context: dg.AssetExecutionContext, org: str, written: dict[str, int], counts: dict[str, int]) -> None:
    for table, rows in written.items():
        if table == WEBHOOK_EVENTS.table:
            continue  # this asset's own materialization
        context.log_event(
            dg.AssetMaterialization(
                asset_key=dg.AssetKey(["warehouse", table]),
                partition=org,
                description=f"Updated by webhook events (run {context.run.run_id[:8]})",
                metadata={"dagster/row_count": counts[table], "rows_written": rows, "source": "webhooks"},
            )
        )


def _quarantine_check(quarantined: int, listed: list[InboxEvent]) -> dg.AssetCheckResult:
    names = "; ".join(f"{e.id} {e.event} ({e.attempts} attempt(s)): {e.last_error}" for e in listed)
    more = f"; and {quarantined - len(listed)} more" if quarantined > len(listed) else ""
    return dg.AssetCheckResult(
        asset_key=WEBHOOK_EVENTS_KEY,  # named, Dagster needs no lookup to resolve it
        check_name=QUARANTINE_CHECK,
        passed=quarantined == 0,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{quarantined} quarantined event(s): {names}{more}. `commops events retry ID|--all` puts them back."
            if quarantined else "No quarantined event."
        ),
        metadata={
            "quarantined": quarantined,
            "events": dg.MetadataValue.json(
                [{"id": e.id, "event": e.event, "attempts": e.attempts, "error": e.last_error,
                  "quarantined_at": e.quarantined_at} for e in listed]
            ),
        },
    )
