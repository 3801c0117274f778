"""Rows in the warehouse's shapes: a refetched KOL detail as a `kols` row, and the `webhook_events`
row of an event the run settled (applied, or quarantined with its error)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from commops_spec.timestamps import UnreadableTimestamp, read_timestamp
from resources.inbox.envelope import Envelope
from resources.inbox import InboxEvent

APPLIED = "applied"
QUARANTINED = "quarantined"

# Detail fields that belong to kol_details (the list shape has them elsewhere or not at all).
_DETAIL_ONLY = frozenset({"bio", "notes", "research_interests", "social", "contact", "metrics"})


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


def event_row(
    event: InboxEvent,
    envelope: Envelope | None,
    run_id: str,
    *,
    applied_at: datetime | None = None,
    error: str | None = None,
    attempts: int | None = None,
) -> dict[str, Any]:
    """The `webhook_events` row of an event: applied at `applied_at`, else quarantined with `error`.
    `envelope` is None for a payload that is not an envelope (the inbox's columns say what it is)."""
    return {
        "id": event.id,
        "event": event.event,
        "created_at": envelope.created_at if envelope else _readable(event.created_at),
        "received_at": read_timestamp(event.received_at),
        "organization_id": event.organization_id,
        "data": json.dumps(envelope.data, sort_keys=True, ensure_ascii=False) if envelope else None,
        "known_event": event.known_event,
        "attempts": event.attempts if attempts is None else attempts,
        "applied_at": applied_at,
        "run_id": run_id,
        "status": QUARANTINED if error is not None else APPLIED,
        "error": error,
    }


def one_line(error: BaseException) -> str:
    """An exception as one line for the inbox and the UI: its class and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]


def _readable(value: str) -> datetime | None:
    try:
        return read_timestamp(value)
    except UnreadableTimestamp:
        return None
