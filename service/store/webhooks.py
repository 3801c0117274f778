"""Webhook registrations: create, read, update, delete, the signing secret, and the webhook's
own state (active / failed, the failure email owed).

A webhook's state moves its queued deliveries along (service/store/deliveries.py holds the
queue): disabling it or marking it failed holds its pending deliveries, enabling or
reactivating it releases them (due now, with a fresh retry schedule), deleting it cancels them.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from commops_spec.constants import ID_PREFIXES
from service.store.db import new_id, now_iso

_WEBHOOK_COLUMNS = "id, url, events, enabled, status, failed_at, failure_reason, created_at, updated_at"


class WebhookNotFound(LookupError):
    pass


# ---------------------------------------------------------------- registrations


def webhook_to_api(row: sqlite3.Row | dict[str, Any]) -> dict[str, Any]:
    """The webhook record as the API returns it; the secret is never part of it."""
    return {
        "id": row["id"],
        "url": row["url"],
        "events": json.loads(row["events"]),
        "enabled": bool(row["enabled"]),
        "status": row["status"],
        "failed_at": row["failed_at"],
        "failure_reason": row["failure_reason"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def create_webhook(conn: sqlite3.Connection, org_id: str, url: str, events: list[str], secret: str) -> dict[str, Any]:
    webhook_id = new_id(ID_PREFIXES["webhook"])
    now = now_iso()
    conn.execute(
        "INSERT INTO webhooks (id, org_id, url, events, secret, enabled, status, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, 1, 'active', ?, ?)",
        (webhook_id, org_id, url, json.dumps(events), secret, now, now),
    )
    return get_webhook(conn, org_id, webhook_id)


def get_webhook(conn: sqlite3.Connection, org_id: str, webhook_id: str) -> dict[str, Any]:
    row = conn.execute(
        f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE id = ? AND org_id = ? AND deleted_at IS NULL",
        (webhook_id, org_id),
    ).fetchone()
    if row is None:
        raise WebhookNotFound(webhook_id)
    return webhook_to_api(row)


def get_webhook_target(conn: sqlite3.Connection, org_id: str, webhook_id: str) -> dict[str, Any]:
    """url and secret of a webhook, for sending a test delivery."""
    row = conn.execute(
        "SELECT id, url, secret FROM webhooks WHERE id = ? AND org_id = ? AND deleted_at IS NULL",
        (webhook_id, org_id),
    ).fetchone()
    if row is None:
        raise WebhookNotFound(webhook_id)
    return dict(row)


def list_webhooks(conn: sqlite3.Connection, org_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE org_id = ? AND deleted_at IS NULL ORDER BY created_at, id",
        (org_id,),
    ).fetchall()
    return [webhook_to_api(row) for row in rows]


def update_webhook(
    conn: sqlite3.Connection,
    org_id: str,
    webhook_id: str,
    *,
    events: list[str] | None = None,
    enabled: bool | None = None,
) -> dict[str, Any]:
    """Change events and/or enabled inside the caller's transaction.

    enabled=false holds the queued deliveries; enabled=true makes a failed webhook active
    again and releases its held deliveries, due now, with a fresh retry schedule.
    """
    current = get_webhook(conn, org_id, webhook_id)
    now = now_iso()
    if events is not None:
        conn.execute(
            "UPDATE webhooks SET events = ?, updated_at = ? WHERE id = ?", (json.dumps(events), now, webhook_id)
        )
    if enabled is False and current["enabled"]:
        conn.execute("UPDATE webhooks SET enabled = 0, updated_at = ? WHERE id = ?", (now, webhook_id))
        _hold_pending(conn, webhook_id, now)
    elif enabled is True and (not current["enabled"] or current["status"] == "failed"):
        conn.execute("UPDATE webhooks SET enabled = 1, updated_at = ? WHERE id = ?", (now, webhook_id))
        reactivate(conn, webhook_id, now)
    return get_webhook(conn, org_id, webhook_id)


def reactivate(conn: sqlite3.Connection, webhook_id: str, now: str) -> None:
    """End a failure episode (if any) and release held deliveries, due now."""
    conn.execute(
        "UPDATE webhooks SET status = 'active', failed_at = NULL, failure_reason = NULL,"
        " notify_pending = 0, updated_at = ? WHERE id = ?",
        (now, webhook_id),
    )
    conn.execute(
        "UPDATE webhook_deliveries SET status = 'pending', failures = 0, next_attempt_at = ?, updated_at = ?"
        " WHERE webhook_id = ? AND status = 'held'",
        (now, now, webhook_id),
    )


def _hold_pending(conn: sqlite3.Connection, webhook_id: str, now: str) -> None:
    conn.execute(
        "UPDATE webhook_deliveries SET status = 'held', updated_at = ? WHERE webhook_id = ? AND status = 'pending'",
        (now, webhook_id),
    )


def delete_webhook(conn: sqlite3.Connection, org_id: str, webhook_id: str) -> None:
    """Soft delete (the attempt log stays for operators); queued deliveries are cancelled."""
    get_webhook(conn, org_id, webhook_id)
    now = now_iso()
    conn.execute("UPDATE webhooks SET deleted_at = ?, enabled = 0, updated_at = ? WHERE id = ?", (now, now, webhook_id))
    conn.execute(
        "UPDATE webhook_deliveries SET status = 'cancelled', updated_at = ?"
        " WHERE webhook_id = ? AND status IN ('pending', 'held')",
        (now, webhook_id),
    )


# ---------------------------------------------------------------- failure episodes


def mark_failed(conn: sqlite3.Connection, webhook_id: str, reason: str, now: str) -> bool:
    """Start a failure episode: the webhook is failed, its pending deliveries held and one email
    owed. False (and nothing changes) when the webhook is not active, e.g. already failed."""
    marked = conn.execute(
        "UPDATE webhooks SET status = 'failed', failed_at = ?, failure_reason = ?, notify_pending = 1, updated_at = ?"
        " WHERE id = ? AND status = 'active'",
        (now, reason, now, webhook_id),
    ).rowcount
    if marked:
        _hold_pending(conn, webhook_id, now)
    return bool(marked)


def owed_notifications(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT w.id, w.org_id, w.url, w.failed_at, w.failure_reason, o.name AS org_name, o.owner_email"
        " FROM webhooks w JOIN organizations o ON o.id = w.org_id"
        " WHERE w.notify_pending = 1 AND w.deleted_at IS NULL"
    ).fetchall()
    return [dict(row) for row in rows]


def mark_notified(conn: sqlite3.Connection, webhook_id: str, failed_at: str | None) -> None:
    """Clear the owed email, unless a newer episode started meanwhile."""
    conn.execute(
        "UPDATE webhooks SET notify_pending = 0, notified_at = ? WHERE id = ? AND failed_at IS ?",
        (now_iso(), webhook_id, failed_at),
    )
