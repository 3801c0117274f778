"""The incremental job's assets: webhook events from the inbox applied to the warehouse.

`warehouse/webhook_events` reads a batch of pending events from the inbox and refetches the
current state they point at (never trusting the payload's order or content), then writes
everything in one warehouse writer session through `WarehouseSession.merge`, the nightly sync's
write path, so the newer row wins by the same rule (KOLs `updated_at` then `_fetched_at`, the
others `_fetched_at`):

| event | what is refetched and merged |
|---|---|
| kol.created, kol.updated, kol.tier_changed, kol.archived | `GET /v1/kols/{id}` → `kols` (list shape) and `kol_details` |
| campaign.* | one complete walk of `/v1/campaigns` → `campaigns` |
| campaign.email_opened, campaign.link_clicked | + one `campaign_engagement` row; + the KOL named (`kol_id`) |
| event.attendee_added, event.rsvp_updated | the KOL named (`kol_id`): its event count and engagement move |
| signal.new, signal.high_impact | `/v1/signals?published_after=<watermark>` → `signals` |
| event.* (others), unknown names | recorded only |

Every event of the batch lands in `webhook_events` with this run's id. `webhooks/applied`
(downstream of `analytics`) marks in the inbox exactly the events whose published row names this
run: an event is marked applied only after its changes are committed and published; any failure
before leaves it pending for the sensor to request again.
"""

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import Field

from assets.analytics import ANALYTICS_KEY
from assets.catalog import (
    CAMPAIGN_ENGAGEMENT,
    CAMPAIGNS,
    KOL_DETAIL_FIELDS_IN_KOLS,
    KOL_DETAILS,
    KOLS,
    SIGNALS,
    WEBHOOK_EVENTS,
    ResourceSpec,
)
from assets.metadata import catalog_reference, column_schema, request_metadata
from assets.records import RecordConverter, raw_schema
from assets.schemas import FETCHED_AT
from resources.api import CommopsApiResource
from resources.commops_api import ApiClient
from resources.inbox import InboxResource
from resources.sql import sql_literal
from resources.warehouse import WarehouseResource, WarehouseSession
from webhook_receiver.inbox import InboxEvent

WEBHOOK_EVENTS_KEY = dg.AssetKey(["warehouse", "webhook_events"])
APPLIED_KEY = dg.AssetKey(["webhooks", "applied"])
APPLY_STEP = "warehouse__webhook_events"  # the op of the apply asset (run config: ops.<step>.config)
BATCH_LIMIT = 500  # events per run at most

KOL_EVENTS = frozenset({"kol.created", "kol.updated", "kol.tier_changed", "kol.archived"})
ENGAGEMENT_EVENTS = frozenset({"campaign.email_opened", "campaign.link_clicked"})
# Events naming a KOL whose derived fields (opens, attendance, engagement level) the service moved
# without emitting kol.updated: the KOL is refetched too.
KOL_NAMING_EVENTS = ENGAGEMENT_EVENTS | {"event.attendee_added", "event.rsvp_updated"}
SIGNAL_EVENTS = frozenset({"signal.new", "signal.high_impact"})
SIGNAL_OVERLAP = timedelta(hours=1)  # before the earliest published_at the batch's payloads state
SIGNAL_FALLBACK_OVERLAP = timedelta(days=1)  # before the newest signal in the warehouse, when they state none

# Detail fields that belong to kol_details (the list shape has them elsewhere or not at all).
_DETAIL_ONLY = frozenset({"bio", "notes", "research_interests", "social", "contact", "metrics"})


class WebhookEventsConfig(dg.Config):
    event_ids: list[str] = Field(
        default=[],
        description="Inbox event ids to apply (the sensor sets them); empty: every pending event, oldest first, "
        "at most `limit`.",
    )
    limit: int = Field(default=BATCH_LIMIT, ge=1, description="Events per run at most when event_ids is empty.")


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def kol_list_shape(detail: dict[str, Any], *, archived_by_event: bool = False) -> dict[str, Any]:
    """GET /v1/kols/{id} (the detail shape) as a row of `kols` (the list shape of GET /v1/kols).

    email and phone come from contact, location {city, state, country} from contact.address,
    event_count from metrics.total_events; is_archived from the detail, else True when the event
    was kol.archived. Detail-only fields (bio, notes, research_interests, social, contact, metrics)
    belong to kol_details; any other field is kept, so fields the schema does not know reach _extra.
    """
    contact = detail.get("contact") if isinstance(detail.get("contact"), dict) else {}
    address = contact.get("address") if isinstance(contact.get("address"), dict) else {}
    metrics = detail.get("metrics") if isinstance(detail.get("metrics"), dict) else {}
    row = {name: value for name, value in detail.items() if name not in _DETAIL_ONLY}
    row["email"] = contact.get("email")
    row["phone"] = contact.get("phone")
    row["location"] = {"city": address.get("city"), "state": address.get("state"), "country": address.get("country")}
    row["event_count"] = metrics.get("total_events")
    if row.get("is_archived") is None:
        row["is_archived"] = archived_by_event
    return row


@dataclass
class Plan:
    """What a batch of events asks for."""

    events: list[InboxEvent]
    kol_ids: dict[str, bool] = field(default_factory=dict)  # id -> archived by an event of the batch
    campaigns: bool = False
    signals: bool = False
    signal_published: list[datetime] = field(default_factory=list)
    engagement: list[dict[str, Any]] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)
    malformed: list[str] = field(default_factory=list)


def plan_batch(events: list[InboxEvent]) -> Plan:
    plan = Plan(events)
    for event in events:
        plan.kinds[event.event] += 1
        try:
            data = event.envelope().get("data")
        except (ValueError, AttributeError):
            data = None
        if not isinstance(data, dict):
            plan.malformed.append(event.id)
            continue
        name = event.event
        if name in KOL_EVENTS:
            if isinstance(data.get("id"), str):
                plan.kol_ids[data["id"]] = plan.kol_ids.get(data["id"], False) or name == "kol.archived"
            else:
                plan.malformed.append(event.id)
        if name in KOL_NAMING_EVENTS and isinstance(data.get("kol_id"), str):
            plan.kol_ids.setdefault(data["kol_id"], False)
        if name.startswith("campaign."):
            plan.campaigns = True
        if name in ENGAGEMENT_EVENTS:
            plan.engagement.append(
                {
                    "event_id": event.id,
                    "event": name,
                    "campaign_id": data.get("campaign_id"),
                    "kol_id": data.get("kol_id"),
                    "email": data.get("email"),
                    "occurred_at": data.get("occurred_at"),
                    "received_at": event.received_at,
                }
            )
        if name in SIGNAL_EVENTS:
            plan.signals = True
            published = _parse_time(data.get("published_at"))
            if published is not None:
                plan.signal_published.append(published)
    return plan


@dataclass
class Fetched:
    kols: list[dict[str, Any]] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    kols_not_found: list[str] = field(default_factory=list)
    campaigns: list[dict[str, Any]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    signals_since: str | None = None


def fetch_current_state(client: ApiClient, plan: Plan, warehouse: WarehouseResource, log: Any) -> Fetched:
    """Refetch what the events point at, through the run's API client."""
    fetched = Fetched()
    found: set[str] = set()
    for path, detail in client.get_many([f"/kols/{kol_id}" for kol_id in plan.kol_ids], skip_missing=True):
        received = _utc(datetime.now(UTC))
        kol_id = path.rsplit("/", 1)[-1]
        found.add(kol_id)
        fetched.kols.append({**kol_list_shape(detail, archived_by_event=plan.kol_ids[kol_id]), FETCHED_AT: received})
        fetched.details.append({**detail, "enriched_at": received})
    fetched.kols_not_found = sorted(set(plan.kol_ids) - found)
    if fetched.kols_not_found:
        log.warning(f"KOLs gone from the API (404), rows kept as they are: {', '.join(fetched.kols_not_found)}")
    if plan.campaigns:
        fetched.campaigns = _walk(client, CAMPAIGNS, {})
    if plan.signals:
        fetched.signals_since = _signal_watermark(plan, warehouse)
        params = {"published_after": fetched.signals_since} if fetched.signals_since else {}
        fetched.signals = _walk(client, SIGNALS, params)
    return fetched


def _walk(client: ApiClient, spec: ResourceSpec, params: dict[str, str]) -> list[dict[str, Any]]:
    """Every item of a complete walk, each stamped with the time its page arrived (`_fetched_at`)."""
    items: list[dict[str, Any]] = []
    for page in client.walk(spec.path, params, sort=spec.sort).pages():
        received = page.received_at.isoformat()
        items.extend({**item, FETCHED_AT: received} for item in page.items)
    return items


def _signal_watermark(plan: Plan, warehouse: WarehouseResource) -> str | None:
    """published_after for the signal walk: the batch's earliest stated published_at minus an hour,
    else the warehouse's newest published_at minus a day; None (every signal) when neither exists."""
    if plan.signal_published:
        since = min(plan.signal_published) - SIGNAL_OVERLAP
    else:
        newest = None
        if warehouse.path.exists():
            with warehouse.writer() as session:
                if session.conn.execute(
                    "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [SIGNALS.table]
                ).fetchone()[0]:
                    newest = session.conn.execute(f"SELECT max(published_at) FROM {SIGNALS.table}").fetchone()[0]
        if newest is None:
            return None
        since = newest - SIGNAL_FALLBACK_OVERLAP
    return since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge_rows(session: WarehouseSession, spec: ResourceSpec, table: pa.Table) -> int:
    """Merge Arrow rows into spec's table through the nightly write path (no lake snapshot: NULL _snapshot_date)."""
    session.ensure_table(spec)
    name = f"_incoming_{spec.table}"
    session.conn.register(name, table)
    try:
        return session.merge(spec, name)
    finally:
        session.conn.unregister(name)


def _plain_table(spec: ResourceSpec, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=raw_schema(spec.schema)).cast(spec.schema)


def write(
    session: WarehouseSession, plan: Plan, fetched: Fetched, applied_at: str, run_id: str
) -> dict[str, int]:
    """Every change of the batch, merged in one writer session; webhook_events last. Returns rows written per table."""
    written: dict[str, int] = {}
    if fetched.kols:
        written[KOLS.table] = _merge_rows(session, KOLS, pa.Table.from_batches([RecordConverter(KOLS.schema).to_batch(fetched.kols)]))
        details = RecordConverter(KOL_DETAILS.schema, ignored=KOL_DETAIL_FIELDS_IN_KOLS).to_batch(fetched.details)
        written[KOL_DETAILS.table] = _merge_rows(session, KOL_DETAILS, pa.Table.from_batches([details]))
    if fetched.campaigns:
        batch = RecordConverter(CAMPAIGNS.schema).to_batch(fetched.campaigns)
        written[CAMPAIGNS.table] = _merge_rows(session, CAMPAIGNS, pa.Table.from_batches([batch]))
    if fetched.signals:
        batch = RecordConverter(SIGNALS.schema).to_batch(fetched.signals)
        written[SIGNALS.table] = _merge_rows(session, SIGNALS, pa.Table.from_batches([batch]))
    if plan.engagement:
        written[CAMPAIGN_ENGAGEMENT.table] = _merge_rows(
            session, CAMPAIGN_ENGAGEMENT, _plain_table(CAMPAIGN_ENGAGEMENT, plan.engagement)
        )
    rows = [
        {
            "id": event.id,
            "event": event.event,
            "created_at": event.created_at,
            "received_at": event.received_at,
            "organization_id": event.organization_id,
            "data": json.dumps(_data(event), sort_keys=True, ensure_ascii=False),
            "known_event": event.known_event,
            "attempts": event.attempts,
            "applied_at": applied_at,
            "run_id": run_id,
        }
        for event in plan.events
    ]
    written[WEBHOOK_EVENTS.table] = _merge_rows(session, WEBHOOK_EVENTS, _plain_table(WEBHOOK_EVENTS, rows))
    return written


def _data(event: InboxEvent) -> Any:
    try:
        return event.envelope().get("data")
    except (ValueError, AttributeError):
        return None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]


def read_batch(inbox: InboxResource, config: WebhookEventsConfig) -> list[InboxEvent]:
    box = inbox.open()
    try:
        events = box.get(config.event_ids) if config.event_ids else box.pending(limit=config.limit)
    finally:
        box.close()
    return [event for event in events if event.applied_at is None]


@dg.asset(
    key=WEBHOOK_EVENTS_KEY,
    group_name="webhooks",
    kinds={"duckdb"},
    pool="warehouse",
    description=(
        "Applies pending webhook events: refetches the KOLs, campaigns and signals they name through the API, "
        "merges them (and campaign_engagement, webhook_events) into the warehouse in one writer session."
    ),
    metadata={
        "table": WEBHOOK_EVENTS.table,
        **column_schema(WEBHOOK_EVENTS.schema, warehouse=True),
        **catalog_reference(WEBHOOK_EVENTS),
    },
)
def webhook_events(
    context: dg.AssetExecutionContext,
    config: WebhookEventsConfig,
    api: CommopsApiResource,
    inbox: InboxResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    started = time.monotonic()
    events = read_batch(inbox, config)
    missing = sorted(set(config.event_ids) - {e.id for e in events})
    if missing:
        context.log.info(f"{len(missing)} requested event(s) already applied or unknown, skipped")
    ids = [event.id for event in events]
    client = api.client
    before = client.stats
    try:
        plan = plan_batch(events)
        fetched = fetch_current_state(client, plan, warehouse, context.log) if events else Fetched()
        with warehouse.writer(context.log) as session:
            applied_at = _utc(datetime.now(UTC))
            written = write(session, plan, fetched, applied_at, context.run.run_id)
            counts = {table: session.count(table) for table in written}
    except Exception as error:
        box = inbox.open()
        try:
            box.mark_failed(ids, _one_line(error))
        finally:
            box.close()
        raise
    for table, rows in written.items():
        if table == WEBHOOK_EVENTS.table:
            continue  # this asset's own materialization
        context.log_event(
            dg.AssetMaterialization(
                asset_key=dg.AssetKey(["warehouse", table]),
                description=f"Updated by webhook events (run {context.run.run_id[:8]})",
                metadata={"dagster/row_count": counts[table], "rows_written": rows, "source": "webhooks"},
            )
        )
    kinds = ", ".join(f"{name} {n}" for name, n in sorted(plan.kinds.items())) or "none"
    context.log.info(f"webhook events: {len(events)} applied ({kinds}); rows written {written}")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": counts.get(WEBHOOK_EVENTS.table, 0),
            "events": len(events),
            "events_by_kind": dg.MetadataValue.json(dict(sorted(plan.kinds.items()))),
            "rows_written": dg.MetadataValue.json(written),
            "kols_refetched": len(fetched.kols),
            "kols_not_found": dg.MetadataValue.json(fetched.kols_not_found),
            "signals_published_after": fetched.signals_since or "",
            "malformed_events": len(plan.malformed),
            **request_metadata(client.stats - before),
            "duration_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3)),
        }
    )


def applied_in_run(warehouse: WarehouseResource, run_id: str) -> tuple[list[str], str | None]:
    """Ids (and their applied_at) of the events whose row in the published analytics.duckdb names `run_id`."""
    import duckdb

    if not warehouse.analytics_path.exists():
        return [], None
    conn = duckdb.connect(str(warehouse.analytics_path), read_only=True)
    try:
        if not conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [WEBHOOK_EVENTS.table]
        ).fetchone()[0]:
            return [], None
        rows = conn.execute(
            f"SELECT id, strftime(applied_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%fZ') "
            f"FROM {WEBHOOK_EVENTS.table} WHERE run_id = {sql_literal(run_id)}"
        ).fetchall()
    finally:
        conn.close()
    return [row[0] for row in rows], (rows[0][1] if rows else None)


@dg.asset(
    key=APPLIED_KEY,
    deps=[ANALYTICS_KEY],
    group_name="webhooks",
    kinds={"sqlite"},
    description=(
        "Marks applied in the inbox exactly the events this run committed and published to analytics.duckdb; "
        "a run that failed before leaves its events pending."
    ),
)
def applied(
    context: dg.AssetExecutionContext, inbox: InboxResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    ids, applied_at = applied_in_run(warehouse, context.run.run_id)
    box = inbox.open()
    try:
        marked = box.mark_applied(ids, applied_at)
        counts = box.counts()
    finally:
        box.close()
    context.log.info(f"inbox: {marked} event(s) marked applied; {counts['pending']} pending")
    return dg.MaterializeResult(
        metadata={
            "events_marked_applied": marked,
            "inbox_pending": counts["pending"],
            "inbox_failing": counts["failing"],
            "inbox": dg.MetadataValue.path(str(inbox.path)),
        }
    )


WEBHOOK_ASSETS = [webhook_events, applied]
