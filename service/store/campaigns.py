"""Campaigns, their resolved recipients and delivery records.

Audience resolution (create_campaign): recipients are the union, by lower-cased
email, of the listed kol_ids (active KOLs of the organization; those without an
email cannot receive and are skipped), the active KOLs with an email matching the
filters (tier, specialty, tags: any value within a filter, all filters together;
a filters object with no non-empty array selects nobody) and the external contacts.
"""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime
from typing import Any

from commops_spec.constants import CAMPAIGN_STATUSES, ID_PREFIXES, PERSONALIZATION_VARIABLES
from service.store import listing, metrics, outbox, search
from service.store import products as product_store
from service.store.db import new_id, now_iso, to_iso

SORT_FIELDS = ("created_at", "updated_at", "name")
MAX_VARIABLES = 1_000  # personalization placeholders per email part; each is expanded per recipient
_VARIABLE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")

# Allowed status changes; draft -> active is "sending".
TRANSITIONS = {
    "draft": {"active", "completed"},
    "active": {"paused", "completed"},
    "paused": {"active", "completed"},
    "completed": set(),
}

_COLUMNS = (
    "id, name, description, type, status, audience_count, email, schedule, products, created_at, updated_at, sent_at"
)


class CampaignRejected(ValueError):
    """The campaign body is well-formed but breaks a rule; maps to 400 invalid_request."""

    def __init__(self, field: str, reason: str, message: str, **details: Any):
        super().__init__(message)
        self.field = field
        self.reason = reason
        self.details = details


class CampaignNotFound(LookupError):
    pass


class InvalidTransition(ValueError):
    pass


def shape(row: sqlite3.Row, counts: tuple[int, int, int, int] = (0, 0, 0, 0)) -> dict[str, Any]:
    sent, delivered, opened, clicked = counts
    email = json.loads(row["email"])
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "type": row["type"],
        "status": row["status"],
        "audience_count": row["audience_count"],
        "email": {"subject": email.get("subject"), "from_name": email.get("from_name")},
        "schedule": json.loads(row["schedule"]),
        "products": json.loads(row["products"]),
        "metrics": {
            "sent": sent,
            "delivered": delivered,
            "opened": opened,
            "clicked": clicked,
            "open_rate": round(opened / delivered, 4) if delivered else 0.0,
            "click_rate": round(clicked / delivered, 4) if delivered else 0.0,
        },
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "sent_at": row["sent_at"],
    }


def _delivery_counts(conn: sqlite3.Connection, ids: list[str]) -> dict[str, tuple[int, int, int, int]]:
    rows = conn.execute(
        "SELECT campaign_id, count(sent_at), count(delivered_at), count(opened_at), count(clicked_at) "
        "FROM campaign_recipients WHERE campaign_id IN (SELECT value FROM json_each(?)) GROUP BY campaign_id",
        (json.dumps(ids),),
    )
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


def get_campaign(conn: sqlite3.Connection, org_id: str, campaign_id: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_COLUMNS} FROM campaigns WHERE id = ? AND org_id = ?",
                       (campaign_id, org_id)).fetchone()
    if row is None:
        raise CampaignNotFound(f"No campaign with id {campaign_id!r} in this organization")
    return shape(row, _delivery_counts(conn, [campaign_id]).get(campaign_id, (0, 0, 0, 0)))


def _check_variables(email: dict[str, Any]) -> None:
    for part in ("subject", "body_html", "body_text"):
        names = _VARIABLE.findall(email.get(part) or "")
        if len(names) > MAX_VARIABLES:
            raise CampaignRejected(f"email.{part}", "too_many_variables",
                                   f"email.{part} holds {len(names):,} personalization variables; "
                                   f"at most {MAX_VARIABLES:,} are allowed", limit=MAX_VARIABLES)
        for name in names:
            if name not in PERSONALIZATION_VARIABLES:
                raise CampaignRejected(
                    f"email.{part}", "unknown_variable",
                    f"Unknown personalization variable {{{{{name}}}}} in email.{part}; "
                    f"known: {', '.join(PERSONALIZATION_VARIABLES)}",
                    variable=name,
                )


def _check_schedule(schedule: dict[str, Any]) -> dict[str, Any]:
    kind = schedule.get("type") or "immediate"
    send_at = schedule.get("send_at")
    if isinstance(send_at, str):
        send_at = datetime.fromisoformat(send_at.replace("Z", "+00:00"))
    stored: dict[str, Any] = {"type": kind, "send_at": to_iso(send_at) if send_at else None}
    if kind == "immediate" and send_at is not None:
        raise CampaignRejected("schedule.send_at", "not_allowed",
                               "schedule.send_at is only allowed when schedule.type is scheduled or recurring")
    if kind == "scheduled" and send_at is None:
        raise CampaignRejected("schedule.send_at", "missing", "schedule.send_at is required when type is scheduled")
    if send_at is not None and send_at <= datetime.now(UTC):
        raise CampaignRejected("schedule.send_at", "not_in_future", "schedule.send_at must be in the future")
    if kind == "recurring":
        if not schedule.get("frequency"):
            raise CampaignRejected("schedule.frequency", "missing",
                                   "schedule.frequency (daily, weekly or monthly) is required when type is recurring")
        stored["frequency"] = schedule["frequency"]
    elif schedule.get("frequency"):
        raise CampaignRejected("schedule.frequency", "not_allowed",
                               "schedule.frequency is only allowed when schedule.type is recurring")
    return stored


def _resolve_audience(conn: sqlite3.Connection, org_id: str, audience: dict[str, Any]) -> dict[str, str | None]:
    """email_lower -> kol_id (None for external contacts)."""
    recipients: dict[str, str | None] = {}
    kol_ids = list(dict.fromkeys(audience.get("kol_ids") or []))
    if kol_ids:
        rows = conn.execute(
            "SELECT id, email_lower FROM kols WHERE org_id = ? AND is_archived = 0 "
            "AND id IN (SELECT value FROM json_each(?))",
            (org_id, json.dumps(kol_ids)),
        ).fetchall()
        found = {r["id"]: r["email_lower"] for r in rows}
        unknown = [k for k in kol_ids if k not in found]
        if unknown:
            raise CampaignRejected(
                "audience.kol_ids", "unknown_ids",
                f"Unknown or archived KOL ids in audience.kol_ids: {', '.join(unknown[:20])}", ids=unknown,
            )
        for kol_id in kol_ids:
            if found[kol_id]:
                recipients.setdefault(found[kol_id], kol_id)
    filters = audience.get("filters") or {}
    if any(filters.get(k) for k in ("tier", "specialty", "tags")):
        where = listing.Where()
        where.add("org_id = ?", org_id)
        where.add("is_archived = 0")
        where.add("email_lower IS NOT NULL")
        where.any_of("tier", filters.get("tier"))
        where.json_array_has_any("specialties", filters.get("specialty"))
        where.json_array_has_any("tags", filters.get("tags"))
        for row in conn.execute(f"SELECT id, email_lower FROM kols WHERE {where.sql()} ORDER BY id", where.params):
            recipients.setdefault(row["email_lower"], row["id"])
    for address in audience.get("external_contacts") or []:
        recipients.setdefault(address.lower(), None)
    return recipients


def create_campaign(conn: sqlite3.Connection, org_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a draft campaign from a validated request body; emits campaign.created.
    Raises CampaignRejected for rule violations (see module docstring and 4.4)."""
    email = dict(body["email"])
    _check_variables(email)
    product_ids = list(dict.fromkeys(body.get("products") or []))
    if product_ids:
        known = product_store.existing_ids(conn, org_id, product_ids)
        unknown = [p for p in product_ids if p not in known]
        if unknown:
            raise CampaignRejected("products", "unknown_ids", f"Unknown product ids: {', '.join(unknown[:20])}",
                                   ids=unknown)
    schedule = _check_schedule(dict(body.get("schedule") or {}))
    recipients = _resolve_audience(conn, org_id, body["audience"])
    if not recipients:
        raise CampaignRejected("audience", "empty", "The audience resolves to no recipient with an email address")
    now = now_iso()
    campaign_id = new_id(ID_PREFIXES["campaign"])
    conn.execute(
        "INSERT INTO campaigns (id, org_id, name, description, type, status, audience, email, products, schedule, "
        "audience_count, created_at, updated_at, search_text) VALUES (?, ?, ?, ?, ?, 'draft', ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            campaign_id, org_id, body["name"], body.get("description"), body["type"],
            json.dumps(body["audience"]), json.dumps(email), json.dumps(product_ids), json.dumps(schedule),
            len(recipients), now, now, search.text("campaigns", (body["name"],)),
        ),
    )
    conn.executemany(
        "INSERT INTO campaign_recipients (campaign_id, email_lower, org_id, kol_id) VALUES (?, ?, ?, ?)",
        [(campaign_id, address, org_id, kol_id) for address, kol_id in recipients.items()],
    )
    created = get_campaign(conn, org_id, campaign_id)
    outbox.emit(conn, org_id, "campaign.created", created)
    return created


def _recipient_kols(conn: sqlite3.Connection, campaign_id: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT kol_id FROM campaign_recipients WHERE campaign_id = ? AND kol_id IS NOT NULL", (campaign_id,))]


def set_campaign_status(conn: sqlite3.Connection, org_id: str, campaign_id: str, status: str) -> dict[str, Any]:
    """Move a campaign along TRANSITIONS. draft -> active sends it: sent_at is set, every
    recipient is marked sent and delivered, campaign.sent is emitted."""
    if status not in CAMPAIGN_STATUSES:
        raise ValueError(f"unknown campaign status {status!r}")
    row = conn.execute("SELECT status FROM campaigns WHERE id = ? AND org_id = ?", (campaign_id, org_id)).fetchone()
    if row is None:
        raise CampaignNotFound(f"No campaign with id {campaign_id!r} in this organization")
    current = row["status"]
    if status == current:
        return get_campaign(conn, org_id, campaign_id)
    if status not in TRANSITIONS[current]:
        raise InvalidTransition(f"campaign {campaign_id} cannot go from {current} to {status}")
    now = now_iso()
    sending = current == "draft" and status == "active"
    if sending:
        conn.execute("UPDATE campaigns SET status = ?, sent_at = ?, updated_at = ? WHERE id = ?",
                     (status, now, now, campaign_id))
        conn.execute("UPDATE campaign_recipients SET sent_at = ?, delivered_at = ? WHERE campaign_id = ?",
                     (now, now, campaign_id))
        metrics.refresh_kol_metrics(conn, _recipient_kols(conn, campaign_id), now=now)
    else:
        conn.execute("UPDATE campaigns SET status = ?, updated_at = ? WHERE id = ?", (status, now, campaign_id))
    campaign = get_campaign(conn, org_id, campaign_id)
    if sending:
        outbox.emit(conn, org_id, "campaign.sent", campaign)
    return campaign


def _record(conn: sqlite3.Connection, org_id: str, campaign_id: str, email_lower: str, kind: str) -> bool:
    row = conn.execute(
        "SELECT r.kol_id, r.delivered_at, r.opened_at, r.clicked_at FROM campaign_recipients r "
        "JOIN campaigns c ON c.id = r.campaign_id WHERE r.campaign_id = ? AND c.org_id = ? AND r.email_lower = ?",
        (campaign_id, org_id, email_lower.lower()),
    ).fetchone()
    if row is None:
        raise CampaignNotFound(f"{email_lower} is not a recipient of campaign {campaign_id!r}")
    if row["delivered_at"] is None or row[f"{kind}_at"] is not None:
        return False  # not delivered yet, or already recorded
    now = now_iso()
    if kind == "opened":
        conn.execute("UPDATE campaign_recipients SET opened_at = ? WHERE campaign_id = ? AND email_lower = ?",
                     (now, campaign_id, email_lower.lower()))
    else:  # a click implies an open
        conn.execute(
            "UPDATE campaign_recipients SET clicked_at = ?, opened_at = coalesce(opened_at, ?) "
            "WHERE campaign_id = ? AND email_lower = ?",
            (now, now, campaign_id, email_lower.lower()),
        )
    conn.execute("UPDATE campaigns SET updated_at = ? WHERE id = ?", (now, campaign_id))
    if row["kol_id"]:
        metrics.refresh_kol_metrics(conn, [row["kol_id"]], now=now)
    event = "campaign.email_opened" if kind == "opened" else "campaign.link_clicked"
    outbox.emit(conn, org_id, event, {"campaign_id": campaign_id, "email": email_lower.lower(),
                                      "kol_id": row["kol_id"], "occurred_at": now})
    return True


def record_open(conn: sqlite3.Connection, org_id: str, campaign_id: str, email_lower: str) -> bool:
    """Record that a recipient opened the email; emits campaign.email_opened. False when
    the email was not delivered yet or the open was already recorded."""
    return _record(conn, org_id, campaign_id, email_lower, "opened")


def record_click(conn: sqlite3.Connection, org_id: str, campaign_id: str, email_lower: str) -> bool:
    """Record a link click (and the open it implies); emits campaign.link_clicked."""
    return _record(conn, org_id, campaign_id, email_lower, "clicked")


def list_campaigns(
    conn: sqlite3.Connection,
    org_id: str,
    *,
    statuses: list[str] | None = None,
    types: list[str] | None = None,
    search: str | None = None,
    paging: listing.Paging = listing.Paging(),
) -> tuple[list[dict[str, Any]], int]:
    where = listing.org_rows(org_id, paging, SORT_FIELDS)
    where.any_of("status", statuses)
    where.any_of("type", types)
    where.search("campaigns", search)
    rows = listing.page_rows(conn, "campaigns", _COLUMNS, where, paging)
    counts = _delivery_counts(conn, [r["id"] for r in rows]) if rows else {}
    return [shape(r, counts.get(r["id"], (0, 0, 0, 0))) for r in rows], listing.count(conn, "campaigns", where)
