"""KOL rows in the API's shapes, and the mutations that emit KOL events.

Mutating functions run inside the caller's db.transaction(conn) and write their
event to the outbox in that transaction. Every mutation sets updated_at = now.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from commops_spec.constants import ID_PREFIXES, KOL_TIERS
from service.store import listing, outbox, search
from service.store.db import new_id, now_iso

SORT_FIELDS = ("created_at", "updated_at", "full_name")  # each has an index (org_id, is_archived, col, id)
INCLUDES = ("events", "campaigns", "interactions", "publications")

_FLAT_COLUMNS = (
    "id, full_name, title, institution, department, specialties, expertise_areas, tags, tier, "
    "engagement_level, email, phone, city, state, country, event_count, last_interaction, "
    "is_archived, created_at, updated_at"
)
# Each include of the detail: its rows for one KOL (newest first), and its 0/1 columns answered as booleans.
_INCLUDED = {
    "events": (
        "SELECT e.id, e.name, e.date, a.role, a.rsvp_status, a.attended FROM event_attendees a "
        "JOIN events e ON e.id = a.event_id WHERE a.kol_id = ? ORDER BY e.date DESC, e.id DESC",
        ("attended",),
    ),
    "campaigns": (
        "SELECT c.id, c.name, substr(c.sent_at, 1, 10) AS sent_at, c.status FROM campaign_recipients r "
        "JOIN campaigns c ON c.id = r.campaign_id WHERE r.kol_id = ? AND r.sent_at IS NOT NULL "
        "ORDER BY c.sent_at DESC, c.id DESC",
        (),
    ),
    "interactions": (
        "SELECT id, type, occurred_at, summary, responded FROM interactions WHERE kol_id = ? "
        "ORDER BY occurred_at DESC, id DESC",
        ("responded",),
    ),
    "publications": (
        "SELECT id, title, journal, year, citations, doi FROM publications WHERE kol_id = ? ORDER BY year DESC, id DESC",
        (),
    ),
}
_ECHOED = ("bio", "notes", "research_interests", "social")  # echoed by create when supplied
_TEXT_FIELDS = ("full_name", "title", "institution", "department", "phone", "bio", "notes")
_LIST_FIELDS = ("specialties", "expertise_areas", "research_interests", "tags")


class DuplicateEmail(Exception):
    def __init__(self, email: str):
        super().__init__(f"A KOL with email {email} already exists in this organization")
        self.email = email


class KolLimitReached(Exception):
    def __init__(self, limit: int):
        super().__init__(f"The plan's limit of {limit} active KOLs is reached")
        self.limit = limit


class KolNotFound(LookupError):
    def __init__(self, kol_id: str):
        super().__init__(f"No KOL with id {kol_id!r} in this organization")
        self.kol_id = kol_id


def flat(row: sqlite3.Row) -> dict[str, Any]:
    """The flat shape of create and list."""
    return {
        "id": row["id"],
        "full_name": row["full_name"],
        "title": row["title"],
        "institution": row["institution"],
        "department": row["department"],
        "specialties": json.loads(row["specialties"]),
        "expertise_areas": json.loads(row["expertise_areas"]),
        "tags": json.loads(row["tags"]),
        "tier": row["tier"],
        "engagement_level": row["engagement_level"],
        "email": row["email"],
        "phone": row["phone"],
        "location": {"city": row["city"], "state": row["state"], "country": row["country"]},
        "event_count": row["event_count"],
        "last_interaction": row["last_interaction"],
        "is_archived": bool(row["is_archived"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def _row(conn: sqlite3.Connection, org_id: str, kol_id: str, columns: str = "*") -> sqlite3.Row:
    row = conn.execute(f"SELECT {columns} FROM kols WHERE id = ? AND org_id = ?", (kol_id, org_id)).fetchone()
    if row is None:
        raise KolNotFound(kol_id)
    return row


def get_kol_flat(conn: sqlite3.Connection, org_id: str, kol_id: str) -> dict[str, Any]:
    return flat(_row(conn, org_id, kol_id, _FLAT_COLUMNS))


def _email_taken(conn: sqlite3.Connection, org_id: str, email_lower: str, except_id: str | None = None) -> bool:
    row = conn.execute(
        "SELECT id FROM kols WHERE org_id = ? AND email_lower = ? AND id IS NOT ?", (org_id, email_lower, except_id)
    ).fetchone()
    return row is not None


def active_count(conn: sqlite3.Connection, org_id: str) -> int:
    return conn.execute("SELECT count(*) FROM kols WHERE org_id = ? AND is_archived = 0", (org_id,)).fetchone()[0]


def _columns_from(fields: dict[str, Any]) -> dict[str, Any]:
    """Request-shaped fields -> column values (only the keys present)."""
    cols: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        if name in fields:
            cols[name] = fields[name]
    for name in _LIST_FIELDS:
        if name in fields:
            cols[name] = json.dumps(list(fields[name] or []))
    if "tier" in fields:
        cols["tier"] = fields["tier"] or "tier_3"
    if "email" in fields:
        cols["email"] = fields["email"]
        cols["email_lower"] = fields["email"].lower() if fields["email"] else None
    for group, keys in (("location", ("city", "state", "country")),
                        ("address", ("street", "city", "state", "postal_code", "country"))):
        if group in fields:
            value = fields[group] or {}
            for key in keys:
                if group == "address" or key in value:
                    cols[key] = value.get(key)
    if "social" in fields:
        social = fields["social"] or {}
        cols["linkedin"] = social.get("linkedin")
        cols["twitter"] = social.get("twitter")
    return cols


def create_kol(conn: sqlite3.Connection, org_id: str, fields: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """Insert a KOL (fields as in the create request); emits kol.created.

    Raises KolLimitReached when the organization already holds `limit` active KOLs,
    DuplicateEmail when the email (case-insensitive) is taken in the organization.
    """
    if limit is not None and active_count(conn, org_id) >= limit:
        raise KolLimitReached(limit)
    cols = _columns_from(fields)
    if cols.get("tier") not in KOL_TIERS:
        cols["tier"] = "tier_3"
    if cols.get("email_lower") and _email_taken(conn, org_id, cols["email_lower"]):
        raise DuplicateEmail(cols["email"])
    now = now_iso()
    cols.update(id=new_id(ID_PREFIXES["kol"]), org_id=org_id, created_at=now, updated_at=now,
                search_text=search.text("kols", (cols.get(name) for name in search.FIELDS["kols"])))
    names = ", ".join(cols)
    try:
        conn.execute(f"INSERT INTO kols ({names}) VALUES ({', '.join('?' * len(cols))})", list(cols.values()))
    except sqlite3.IntegrityError as exc:  # a concurrent writer took the email first
        if "email" in str(exc) and cols.get("email"):
            raise DuplicateEmail(cols["email"]) from exc
        raise
    created = get_kol_flat(conn, org_id, cols["id"])
    for name in _ECHOED:
        if fields.get(name) is not None:
            created[name] = fields[name]
    if "social" in created:
        created["social"] = {"linkedin": created["social"].get("linkedin"), "twitter": created["social"].get("twitter")}
    outbox.emit(conn, org_id, "kol.created", created)
    return created


def update_kol(conn: sqlite3.Connection, org_id: str, kol_id: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Change profile fields (not tier: see change_tier); emits kol.updated with the flat shape."""
    if "tier" in changes:
        raise ValueError("use change_tier to change a KOL's tier")
    _row(conn, org_id, kol_id, "id")
    cols = _columns_from(changes)
    if cols.get("email_lower") and _email_taken(conn, org_id, cols["email_lower"], except_id=kol_id):
        raise DuplicateEmail(cols["email"])
    searched = search.FIELDS["kols"]
    if any(name in cols for name in searched):
        current = _row(conn, org_id, kol_id, ", ".join(searched))
        cols["search_text"] = search.text("kols", (cols[name] if name in cols else current[name] for name in searched))
    cols["updated_at"] = now_iso()
    assignments = ", ".join(f"{name} = ?" for name in cols)
    conn.execute(f"UPDATE kols SET {assignments} WHERE id = ? AND org_id = ?", [*cols.values(), kol_id, org_id])
    updated = get_kol_flat(conn, org_id, kol_id)
    outbox.emit(conn, org_id, "kol.updated", updated)
    return updated


def change_tier(conn: sqlite3.Connection, org_id: str, kol_id: str, tier: str) -> dict[str, Any]:
    """Set the tier; emits kol.tier_changed (data: flat shape + previous_tier) when it changes."""
    if tier not in KOL_TIERS:
        raise ValueError(f"unknown tier {tier!r}")
    previous = _row(conn, org_id, kol_id, "tier")["tier"]
    if previous == tier:
        return get_kol_flat(conn, org_id, kol_id)
    conn.execute("UPDATE kols SET tier = ?, updated_at = ? WHERE id = ? AND org_id = ?",
                 (tier, now_iso(), kol_id, org_id))
    changed = {**get_kol_flat(conn, org_id, kol_id), "previous_tier": previous}
    outbox.emit(conn, org_id, "kol.tier_changed", changed)
    return changed


def archive_kol(conn: sqlite3.Connection, org_id: str, kol_id: str) -> dict[str, Any]:
    """Archive a KOL; emits kol.archived. Archiving an archived KOL changes nothing."""
    if _row(conn, org_id, kol_id, "is_archived")["is_archived"]:
        return get_kol_flat(conn, org_id, kol_id)
    conn.execute("UPDATE kols SET is_archived = 1, updated_at = ? WHERE id = ? AND org_id = ?",
                 (now_iso(), kol_id, org_id))
    archived = get_kol_flat(conn, org_id, kol_id)
    outbox.emit(conn, org_id, "kol.archived", archived)
    return archived


def list_kols(
    conn: sqlite3.Connection,
    org_id: str,
    *,
    tiers: list[str] | None = None,
    specialties: list[str] | None = None,
    engagement_levels: list[str] | None = None,
    tags: list[str] | None = None,
    search: str | None = None,
    is_archived: bool = False,
    paging: listing.Paging = listing.Paging(),
) -> tuple[list[dict[str, Any]], int]:
    """One page of flat KOLs and the number matching. Multi-valued filters match any of
    their values; different filters must all match."""
    where = listing.org_rows(org_id, paging, SORT_FIELDS)
    where.add("is_archived = ?", 1 if is_archived else 0)
    where.any_of("tier", tiers)
    where.any_of("engagement_level", engagement_levels)
    where.json_array_has_any("specialties", specialties)
    where.json_array_has_any("tags", tags)
    where.search("kols", search)
    rows = listing.page_rows(conn, "kols", _FLAT_COLUMNS, where, paging)
    return [flat(row) for row in rows], listing.count(conn, "kols", where)


def get_kol_detail(conn: sqlite3.Connection, org_id: str, kol_id: str, include: set[str] | frozenset[str] = frozenset()
                   ) -> dict[str, Any]:
    """The detail shape: contact, social, metrics; included arrays on request."""
    row = _row(conn, org_id, kol_id)
    detail: dict[str, Any] = {
        "id": row["id"],
        "full_name": row["full_name"],
        "title": row["title"],
        "institution": row["institution"],
        "department": row["department"],
        "bio": row["bio"],
        "specialties": json.loads(row["specialties"]),
        "expertise_areas": json.loads(row["expertise_areas"]),
        "research_interests": json.loads(row["research_interests"]),
        "tags": json.loads(row["tags"]),
        "tier": row["tier"],
        "engagement_level": row["engagement_level"],
        "contact": {
            "email": row["email"],
            "phone": row["phone"],
            "address": {
                "street": row["street"],
                "city": row["city"],
                "state": row["state"],
                "postal_code": row["postal_code"],
                "country": row["country"],
            },
        },
        "social": {"linkedin": row["linkedin"], "twitter": row["twitter"]},
        "metrics": {
            "total_events": row["event_count"],
            "total_campaigns": row["total_campaigns"],
            "email_open_rate": row["email_open_rate"],
            "response_rate": row["response_rate"],
            "h_index": row["h_index"],
            "publications_count": row["publications_count"],
        },
        "last_interaction": row["last_interaction"],
        "notes": row["notes"],
        "is_archived": bool(row["is_archived"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
    for name in INCLUDES:
        if name in include:
            sql, flags = _INCLUDED[name]
            detail[name] = [dict(r) | {flag: bool(r[flag]) for flag in flags} for r in conn.execute(sql, (kol_id,))]
    return detail
