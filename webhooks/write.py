"""Writing a batch: every change merged in one warehouse writer session through
`WarehouseSession.merge`, the nightly sync's write path, so the newer row wins by the same rule
(KOLs `updated_at` then `_fetched_at`, the others `_fetched_at`); `webhook_events` last."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from sync.catalog import (
    CAMPAIGN_ENGAGEMENT,
    CAMPAIGNS,
    KOL_DETAIL_FIELDS_IN_KOLS,
    KOL_DETAILS,
    KOLS,
    SIGNALS,
    WEBHOOK_EVENTS,
    ResourceSpec,
)
from sync.records import RecordConverter
from webhooks.refetch import Fetched
from webhooks.reshape import APPLIED, QUARANTINED
from resources.sql import sql_literal
from resources.warehouse import WarehouseSession
from resources.inbox import InboxEvent


def write(
    session: WarehouseSession,
    org: str,
    fetched: Fetched,
    engagement: list[dict[str, Any]],
    events: list[dict[str, Any]],
    unreadable: Counter[str],
) -> dict[str, int]:
    """Merges the refetched rows, the engagement rows and the events' rows; returns rows written per table.
    Values of the refetched rows that could not be read (kept raw in _extra) are counted into `unreadable`."""
    written: dict[str, int] = {}
    refetched = [
        (KOLS, RecordConverter(KOLS.schema), fetched.kols),
        (KOL_DETAILS, RecordConverter(KOL_DETAILS.schema, ignored=KOL_DETAIL_FIELDS_IN_KOLS), fetched.details),
        (CAMPAIGNS, RecordConverter(CAMPAIGNS.schema), fetched.campaigns),
        (SIGNALS, RecordConverter(SIGNALS.schema), fetched.signals),
    ]
    for spec, converter, records in refetched:
        if records:
            written[spec.table] = _merge_records(session, org, spec, converter, records)
            unreadable.update({f"{spec.table}.{path}": n for path, n in converter.unreadable.items()})
    if engagement:
        written[CAMPAIGN_ENGAGEMENT.table] = _merge(session, org, CAMPAIGN_ENGAGEMENT, _table(CAMPAIGN_ENGAGEMENT, engagement))
    session.ensure_table(WEBHOOK_EVENTS)
    # Rows written before the status column were all applied.
    session.conn.execute(f"UPDATE {WEBHOOK_EVENTS.table} SET status = {sql_literal(APPLIED)} WHERE status IS NULL")
    written[WEBHOOK_EVENTS.table] = _merge(session, org, WEBHOOK_EVENTS, _table(WEBHOOK_EVENTS, events))
    return written


def unrecorded_quarantine(session: WarehouseSession, set_aside: list[InboxEvent], org: str) -> list[InboxEvent]:
    """The quarantined inbox events whose `webhook_events` row does not say so yet: those a failure
    outside the apply step set aside (the job's failure hook, the run failure sensor)."""
    if not set_aside or not session.exists(WEBHOOK_EVENTS.table):
        return set_aside
    recorded = {
        row[0]
        for row in session.conn.execute(
            f"SELECT id FROM {WEBHOOK_EVENTS.table} WHERE org = ? AND status = ? AND list_contains(?, id)",
            [org, QUARANTINED, [event.id for event in set_aside]],
        ).fetchall()
    }
    return [event for event in set_aside if event.id not in recorded]


def _merge_records(session: WarehouseSession, org: str, spec: ResourceSpec, converter: RecordConverter, records: list[dict]) -> int:
    return _merge(session, org, spec, pa.Table.from_batches([converter.to_batch(records)]))


def _merge(session: WarehouseSession, org: str, spec: ResourceSpec, table: pa.Table) -> int:
    """Merge Arrow rows into spec's table (no lake snapshot holds them: NULL _snapshot_date)."""
    session.ensure_table(spec)
    name = f"_incoming_{spec.table}"
    session.conn.register(name, table)
    try:
        return session.merge(spec, name, org=org)
    finally:
        session.conn.unregister(name)


def _table(spec: ResourceSpec, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows built by this job, typed already (datetimes, not strings)."""
    return pa.Table.from_pylist(rows, schema=spec.schema)
