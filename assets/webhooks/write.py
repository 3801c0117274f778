"""Writing a batch: every change merged in one warehouse writer session through
`WarehouseSession.merge`, the nightly sync's write path, so the newer row wins by the same rule
(KOLs `updated_at` then `_fetched_at`, the others `_fetched_at`); `webhook_events` last."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

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
from assets.records import RecordConverter
from assets.webhooks.refetch import Fetched
from assets.webhooks.reshape import APPLIED, QUARANTINED
from resources.sql import sql_literal
from resources.warehouse import WarehouseSession
from webhook_receiver.inbox import InboxEvent


def write(
    session: WarehouseSession,
    fetched: Fetched,
    engagement: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> dict[str, int]:
    """Merges the refetched rows, the engagement rows and the events' rows; returns rows written per table."""
    written: dict[str, int] = {}
    if fetched.kols:
        written[KOLS.table] = _merge_records(session, KOLS, RecordConverter(KOLS.schema), fetched.kols)
        details = RecordConverter(KOL_DETAILS.schema, ignored=KOL_DETAIL_FIELDS_IN_KOLS)
        written[KOL_DETAILS.table] = _merge_records(session, KOL_DETAILS, details, fetched.details)
    if fetched.campaigns:
        written[CAMPAIGNS.table] = _merge_records(session, CAMPAIGNS, RecordConverter(CAMPAIGNS.schema), fetched.campaigns)
    if fetched.signals:
        written[SIGNALS.table] = _merge_records(session, SIGNALS, RecordConverter(SIGNALS.schema), fetched.signals)
    if engagement:
        written[CAMPAIGN_ENGAGEMENT.table] = _merge(session, CAMPAIGN_ENGAGEMENT, _table(CAMPAIGN_ENGAGEMENT, engagement))
    session.ensure_table(WEBHOOK_EVENTS)
    # Rows written before the status column were all applied.
    session.conn.execute(f"UPDATE {WEBHOOK_EVENTS.table} SET status = {sql_literal(APPLIED)} WHERE status IS NULL")
    written[WEBHOOK_EVENTS.table] = _merge(session, WEBHOOK_EVENTS, _table(WEBHOOK_EVENTS, events))
    return written


def unrecorded_quarantine(session: WarehouseSession, set_aside: list[InboxEvent]) -> list[InboxEvent]:
    """The quarantined inbox events whose `webhook_events` row does not say so yet: those a failure
    outside the apply step set aside (the job's failure hook, the run failure sensor)."""
    if not set_aside or not session.exists(WEBHOOK_EVENTS.table):
        return set_aside
    recorded = {
        row[0]
        for row in session.conn.execute(
            f"SELECT id FROM {WEBHOOK_EVENTS.table} WHERE status = ? AND list_contains(?, id)",
            [QUARANTINED, [event.id for event in set_aside]],
        ).fetchall()
    }
    return [event for event in set_aside if event.id not in recorded]


def _merge_records(session: WarehouseSession, spec: ResourceSpec, converter: RecordConverter, records: list[dict]) -> int:
    return _merge(session, spec, pa.Table.from_batches([converter.to_batch(records)]))


def _merge(session: WarehouseSession, spec: ResourceSpec, table: pa.Table) -> int:
    """Merge Arrow rows into spec's table (no lake snapshot holds them: NULL _snapshot_date)."""
    session.ensure_table(spec)
    name = f"_incoming_{spec.table}"
    session.conn.register(name, table)
    try:
        return session.merge(spec, f"(SELECT *, NULL::DATE AS _snapshot_date, now() AS _loaded_at FROM {name})")
    finally:
        session.conn.unregister(name)


def _table(spec: ResourceSpec, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows built by this job, typed already (datetimes, not strings)."""
    return pa.Table.from_pylist(rows, schema=spec.schema)
