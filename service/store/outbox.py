"""The event outbox: events are written in the caller's transaction.

A change and the event it causes commit or roll back together, so a crash can
neither lose an event nor emit one for a change that never happened. The payload
is serialized once, here; deliveries send (and sign) exactly these bytes. Each event is
fanned out into one pending delivery per subscribed webhook (service/store/deliveries.py).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from commops_spec.constants import EVENTS, ID_PREFIXES
from service.store import deliveries
from service.store.db import new_id, now_iso


def emit(conn: sqlite3.Connection, org_id: str, event: str, data: dict[str, Any]) -> str:
    """Record `event` for `org_id` inside the caller's open transaction; return its wh_evt_ id."""
    if event not in EVENTS:
        raise ValueError(f"unknown event name {event!r}")
    if not conn.in_transaction:
        raise RuntimeError("outbox.emit must run inside the transaction of the change it reports")
    event_id = new_id(ID_PREFIXES["webhook_event"], 20)
    created_at = now_iso()
    body = event_body(event_id, event, created_at, data, org_id)
    cursor = conn.execute(
        "INSERT INTO webhook_events (id, org_id, event, payload, created_at) VALUES (?, ?, ?, ?, ?)",
        (event_id, org_id, event, body, created_at),
    )
    # Deliveries are created in the same transaction, so they exist exactly when the event does.
    deliveries.fan_out(conn, org_id, event, cursor.lastrowid, event_id, created_at)
    return event_id


def event_body(event_id: str, event: str, created_at: str, data: dict[str, Any], org_id: str) -> bytes:
    """The exact bytes of a part 6 payload, as stored, sent and signed."""
    payload = {"id": event_id, "event": event, "created_at": created_at, "data": data, "organization_id": org_id}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
