"""The webhook delivery queue: the fan-out of events into deliveries, the worker's leases and
attempt log, test deliveries, and reading and redelivering deliveries.

Delivery states: pending (due at next_attempt_at), held (its webhook is disabled or failed;
resumes when the webhook is active and enabled again), delivered, failed (retries
exhausted) and cancelled (webhook deleted). `failures` counts failed attempts of the
current retry schedule; `attempts` counts every attempt ever made and numbers the log.
Registrations and the webhook's own state are in service/store/webhooks.py.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from commops_spec.constants import WEBHOOK_RETRY_DELAYS_SECONDS
from service.store import webhooks
from service.store.db import now_iso, to_iso, transaction

DELIVERY_PREFIX = "whd_"
# The first attempt plus one retry per delay of part 6: six attempts in all.
MAX_FAILURES = len(WEBHOOK_RETRY_DELAYS_SECONDS) + 1


class DeliveryNotFound(LookupError):
    pass


# ---------------------------------------------------------------- fan-out (called by outbox.emit)


def fan_out(conn: sqlite3.Connection, org_id: str, event: str, event_seq: int, event_id: str, now: str) -> None:
    """One delivery per enabled webhook of the org subscribed to `event`, in the caller's transaction.

    Disabled webhooks get nothing (disabled means "do not send me these"); failed ones get a
    held delivery, so a receiver that was down loses nothing once it is reactivated.
    """
    conn.execute(
        "INSERT INTO webhook_deliveries (id, webhook_id, org_id, event_seq, event_id, event, status,"
        " next_attempt_at, created_at, updated_at)"
        " SELECT ? || lower(hex(randomblob(10))), w.id, w.org_id, ?, ?, ?,"
        "        CASE w.status WHEN 'active' THEN 'pending' ELSE 'held' END, ?, ?, ?"
        " FROM webhooks w"
        " WHERE w.org_id = ? AND w.enabled = 1 AND w.deleted_at IS NULL"
        "   AND EXISTS (SELECT 1 FROM json_each(w.events) WHERE value = ?)",
        (DELIVERY_PREFIX, event_seq, event_id, event, now, now, now, org_id, event),
    )


# ---------------------------------------------------------------- the worker's side


@dataclass(frozen=True)
class Claimed:
    id: str
    webhook_id: str
    event_id: str
    body: bytes
    url: str
    secret: str


# The webhooks whose pending deliveries are sent (webhooks_with_due_work) and waited for (next_due).
_SENDING_WEBHOOK = "w.enabled = 1 AND w.status = 'active' AND w.deleted_at IS NULL"


def webhooks_with_due_work(conn: sqlite3.Connection, now: str) -> list[str]:
    rows = conn.execute(
        "SELECT w.id FROM webhooks w"
        f" WHERE {_SENDING_WEBHOOK}"
        "   AND EXISTS (SELECT 1 FROM webhook_deliveries d"
        "               WHERE d.status = 'pending' AND d.webhook_id = w.id AND d.next_attempt_at <= ?"
        "                 AND (d.lease_until IS NULL OR d.lease_until < ?))",
        (now, now),
    ).fetchall()
    return [row["id"] for row in rows]


def next_due(conn: sqlite3.Connection) -> str | None:
    """When the next delivery an active webhook owes falls due: its next attempt, or the end of the lease another
    worker holds on it, whichever is later (storage format); None when nothing is pending."""
    row = conn.execute(
        "SELECT min(max(d.next_attempt_at, coalesce(d.lease_until, ''))) FROM webhook_deliveries d"
        " JOIN webhooks w ON w.id = d.webhook_id"
        f" WHERE d.status = 'pending' AND {_SENDING_WEBHOOK}"
    ).fetchone()
    return row[0]


def claim_due(
    conn: sqlite3.Connection, webhook_id: str, owner: str, now: str, lease_until: str, limit: int
) -> list[Claimed]:
    """Lease up to `limit` due deliveries of one webhook, oldest first (safe with several workers:
    the IMMEDIATE transaction holds the write lock from the read to the lease)."""
    with transaction(conn):
        rows = conn.execute(
            "SELECT d.id, d.webhook_id, d.event_id, coalesce(d.test_payload, e.payload) AS body, w.url, w.secret"
            " FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id"
            " LEFT JOIN webhook_events e ON e.seq = d.event_seq"
            " WHERE d.status = 'pending' AND d.webhook_id = ? AND d.next_attempt_at <= ?"
            "   AND (d.lease_until IS NULL OR d.lease_until < ?)"
            " ORDER BY d.next_attempt_at, d.event_seq LIMIT ?",
            (webhook_id, now, now, limit),
        ).fetchall()
        conn.executemany(
            "UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ? WHERE id = ?",
            [(owner, lease_until, row["id"]) for row in rows],
        )
    return [Claimed(**dict(row)) for row in rows]


def release_leases(conn: sqlite3.Connection, owner: str) -> None:
    conn.execute(
        "UPDATE webhook_deliveries SET lease_owner = NULL, lease_until = NULL"
        " WHERE status IN ('pending', 'held') AND lease_owner = ?",
        (owner,),
    )


@dataclass(frozen=True)
class Outcome:
    """What one POST to a receiver came to."""

    started_at: datetime
    status_code: int | None
    error: str | None
    latency_ms: float
    response_excerpt: str | None

    @property
    def succeeded(self) -> bool:
        return self.error is None and self.status_code is not None and 200 <= self.status_code < 300


@dataclass(frozen=True)
class AttemptRecord:
    delivery_id: str
    webhook_id: str
    outcome: Outcome


def record_attempts(
    conn: sqlite3.Connection, attempts: list[AttemptRecord], retry_delay: Callable[[int], float], now: datetime
) -> list[str]:
    """Log attempts and move their deliveries on, in one transaction; returns each delivery's new status.

    `retry_delay(failures)` gives the seconds to wait after the n-th failed attempt. When the
    last retry fails the delivery is failed and, if the webhook was active, the webhook is
    marked failed with an email owed: one email per failure episode.
    """
    with transaction(conn):
        return [_record_one(conn, attempt, retry_delay, now) for attempt in attempts]


def _record_one(
    conn: sqlite3.Connection, attempt: AttemptRecord, retry_delay: Callable[[int], float], now: datetime
) -> str:
    now_text = to_iso(now)
    row = conn.execute(
        "SELECT status, attempts, failures FROM webhook_deliveries WHERE id = ?", (attempt.delivery_id,)
    ).fetchone()
    number = row["attempts"] + 1
    _insert_attempt(conn, attempt, number)
    if attempt.outcome.succeeded:
        status, failures, next_at, delivered_at = "delivered", row["failures"], None, now_text
    else:
        failures, delivered_at = row["failures"] + 1, None
        status = row["status"] if row["status"] in ("held", "cancelled") else "pending"
        if failures >= MAX_FAILURES:
            next_at = None
            if status == "pending":
                status = "failed"
        else:
            next_at = to_iso(now + timedelta(seconds=retry_delay(failures)))
    conn.execute(
        "UPDATE webhook_deliveries SET status = ?, attempts = ?, failures = ?, next_attempt_at = ?,"
        " last_status_code = ?, last_error = ?, delivered_at = ?, lease_owner = NULL, lease_until = NULL,"
        " updated_at = ? WHERE id = ?",
        (
            status,
            number,
            failures,
            next_at,
            attempt.outcome.status_code,
            attempt.outcome.error,
            delivered_at,
            now_text,
            attempt.delivery_id,
        ),
    )
    if status == "failed":
        _mark_webhook_failed(conn, attempt, number, now_text)
    return status


def _insert_attempt(conn: sqlite3.Connection, attempt: AttemptRecord, number: int) -> None:
    conn.execute(
        "INSERT INTO webhook_attempts (delivery_id, webhook_id, number, started_at, status_code, error,"
        " latency_ms, response_excerpt) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            attempt.delivery_id,
            attempt.webhook_id,
            number,
            to_iso(attempt.outcome.started_at),
            attempt.outcome.status_code,
            attempt.outcome.error,
            attempt.outcome.latency_ms,
            attempt.outcome.response_excerpt,
        ),
    )



def _mark_webhook_failed(conn: sqlite3.Connection, attempt: AttemptRecord, number: int, now: str) -> None:
    cause = attempt.outcome.error or f"HTTP {attempt.outcome.status_code}"
    webhooks.mark_failed(
        conn, attempt.webhook_id, f"delivery {attempt.delivery_id} failed {number} attempts; last: {cause}", now
    )


# ---------------------------------------------------------------- test deliveries


def record_test_delivery(
    conn: sqlite3.Connection,
    org_id: str,
    event_id: str,
    event: str,
    body: bytes,
    attempt: AttemptRecord,
) -> None:
    """Log a test delivery and its single attempt (test deliveries are never retried)."""
    now = now_iso()
    status = "delivered" if attempt.outcome.succeeded else "failed"
    with transaction(conn):
        conn.execute(
            "INSERT INTO webhook_deliveries (id, webhook_id, org_id, event_seq, event_id, event, test_payload, status,"
            " attempts, failures, last_status_code, last_error, created_at, updated_at, delivered_at)"
            " VALUES (?, ?, ?, NULL, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)",
            (
                attempt.delivery_id,
                attempt.webhook_id,
                org_id,
                event_id,
                event,
                body,
                status,
                0 if attempt.outcome.succeeded else 1,
                attempt.outcome.status_code,
                attempt.outcome.error,
                now,
                now,
                now if attempt.outcome.succeeded else None,
            ),
        )
        _insert_attempt(conn, attempt, 1)


# ---------------------------------------------------------------- reading deliveries and redelivery


def _delivery_to_api(row: sqlite3.Row, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "webhook_id": row["webhook_id"],
        "event_id": row["event_id"],
        "event": row["event"],
        "test": row["event_seq"] is None,
        "status": row["status"],
        "attempt_count": row["attempts"],
        "next_attempt_at": row["next_attempt_at"] if row["status"] == "pending" else None,
        "last_status_code": row["last_status_code"],
        "last_error": row["last_error"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "delivered_at": row["delivered_at"],
        "attempts": attempts,
    }


def _attempts_by_delivery(conn: sqlite3.Connection, delivery_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {delivery_id: [] for delivery_id in delivery_ids}
    rows = conn.execute(
        "SELECT delivery_id, number, started_at, status_code, error, latency_ms, response_excerpt"
        " FROM webhook_attempts WHERE delivery_id IN (SELECT value FROM json_each(?)) ORDER BY delivery_id, number",
        (json.dumps(delivery_ids),),
    ).fetchall()
    for row in rows:
        grouped[row["delivery_id"]].append(
            {
                "attempt": row["number"],
                "started_at": row["started_at"],
                "status_code": row["status_code"],
                "error": row["error"],
                "latency_ms": round(row["latency_ms"], 3),
                "response_excerpt": row["response_excerpt"],
            }
        )
    return grouped


def list_deliveries(
    conn: sqlite3.Connection,
    org_id: str,
    webhook_id: str,
    *,
    statuses: list[str] | None,
    event: str | None,
    page: int,
    per_page: int,
) -> tuple[list[dict[str, Any]], int]:
    """Newest first, each with its attempts; (items, total)."""
    webhooks.get_webhook(conn, org_id, webhook_id)
    where = ["webhook_id = ?"]
    params: list[Any] = [webhook_id]
    if statuses:
        where.append("status IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(statuses))
    if event:
        where.append("event = ?")
        params.append(event)
    clause = " AND ".join(where)
    total = conn.execute(f"SELECT count(*) FROM webhook_deliveries WHERE {clause}", params).fetchone()[0]
    rows = conn.execute(
        f"SELECT * FROM webhook_deliveries WHERE {clause} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        [*params, per_page, (page - 1) * per_page],
    ).fetchall()
    attempts = _attempts_by_delivery(conn, [row["id"] for row in rows])
    return [_delivery_to_api(row, attempts[row["id"]]) for row in rows], total


def get_delivery(conn: sqlite3.Connection, org_id: str, webhook_id: str, delivery_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT d.* FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id"
        " WHERE d.id = ? AND d.webhook_id = ? AND w.org_id = ? AND w.deleted_at IS NULL",
        (delivery_id, webhook_id, org_id),
    ).fetchone()
    if row is None:
        raise DeliveryNotFound(delivery_id)
    return _delivery_to_api(row, _attempts_by_delivery(conn, [delivery_id])[delivery_id])


def redeliver(
    conn: sqlite3.Connection,
    org_id: str,
    webhook_id: str,
    *,
    delivery_id: str | None = None,
    since: str | None = None,
) -> int:
    """Queue deliveries again, due now, with a fresh retry schedule; returns how many.

    One delivery (any final status, so a receiver can ask for a delivered event again) or
    every failed delivery created at or after `since`. An enabled webhook that is failed is
    made active again: asking for a redelivery says the receiver is back.
    """
    webhook = webhooks.get_webhook(conn, org_id, webhook_id)
    now = now_iso()
    status = "pending" if webhook["enabled"] else "held"
    if delivery_id is not None:
        get_delivery(conn, org_id, webhook_id, delivery_id)
        count = conn.execute(
            "UPDATE webhook_deliveries SET status = ?, failures = 0, next_attempt_at = ?, updated_at = ?"
            " WHERE id = ? AND event_seq IS NOT NULL AND status IN ('delivered', 'failed', 'cancelled')",
            (status, now, now, delivery_id),
        ).rowcount
    else:
        count = conn.execute(
            "UPDATE webhook_deliveries SET status = ?, failures = 0, next_attempt_at = ?, updated_at = ?"
            " WHERE webhook_id = ? AND status = 'failed' AND event_seq IS NOT NULL AND created_at >= ?",
            (status, now, now, webhook_id, since or ""),
        ).rowcount
    if webhook["enabled"] and webhook["status"] == "failed":
        webhooks.reactivate(conn, webhook_id, now)
    return count
