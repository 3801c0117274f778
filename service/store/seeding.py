"""Set-based SQL for the seed's bulk load.

The seed writes rows directly, one `executemany` per table and chunk, and emits no
webhook events: it is a bulk load, not activity. Column order of each INSERT is
the tuple order the generator in service/seed.py produces.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from service.store import search

COLUMNS: dict[str, tuple[str, ...]] = {
    "product_lines": ("id", "org_id", "name"),
    "products": (
        "id", "org_id", "name", "description", "product_line_id", "status", "regulatory_status",
        "target_markets", "key_features", "specifications", "market_status", "created_at", "updated_at",
    ),
    "events": ("id", "org_id", "name", "type", "date", "city", "country", "status", "created_at", "updated_at"),
    "kols": (
        "id", "org_id", "full_name", "title", "institution", "department", "specialties", "expertise_areas",
        "research_interests", "tier", "email", "email_lower", "phone", "street", "city", "state", "postal_code",
        "country", "bio", "notes", "tags", "linkedin", "twitter", "is_archived", "created_at", "updated_at",
    ),
    "event_attendees": ("event_id", "kol_id", "org_id", "role", "rsvp_status", "attended", "updated_at"),
    "interactions": ("id", "org_id", "kol_id", "type", "occurred_at", "summary", "responded"),
    "publications": ("id", "org_id", "kol_id", "title", "journal", "year", "citations", "doi"),
    "campaigns": (
        "id", "org_id", "name", "description", "type", "status", "audience", "email", "products", "schedule",
        "audience_count", "created_at", "updated_at", "sent_at",
    ),
    "campaign_recipients": (
        "campaign_id", "email_lower", "org_id", "kol_id", "sent_at", "delivered_at", "opened_at", "clicked_at",
    ),
    "signals": (
        "id", "org_id", "title", "url", "source_key", "source_name", "source_country", "source_region", "content",
        "ai_summary", "impact_level", "impact_score", "impact_categories", "sentiment", "product_relevance",
        "is_read", "is_bookmarked", "published_at", "fetched_at", "updated_at",
    ),
    "signal_products": ("signal_id", "product_id", "org_id"),
}


def _insert(table: str) -> str:
    cols = (*COLUMNS[table], "search_text") if table in search.FIELDS else COLUMNS[table]
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


_INSERTS = {table: _insert(table) for table in COLUMNS}


def tune_for_bulk_load(conn: sqlite3.Connection) -> None:
    """Connection-level settings for a bulk load (this connection only).

    synchronous=OFF trades durability of the last commits on power loss for speed;
    a seed interrupted that way is simply run again into a fresh database.
    """
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -262144")
    conn.execute("PRAGMA temp_store = MEMORY")


def insert_rows(conn: sqlite3.Connection, table: str, rows: Iterable[Sequence[object]]) -> None:
    """Insert `rows` (tuples in COLUMNS[table] order) inside the caller's transaction; the
    searchable tables get their search_text computed here."""
    if table in search.FIELDS:
        rows = search.with_text(table, COLUMNS[table], rows)
    conn.executemany(_INSERTS[table], rows)


def org_exists(conn: sqlite3.Connection, org_id: str) -> bool:
    return conn.execute("SELECT 1 FROM organizations WHERE id = ?", (org_id,)).fetchone() is not None


def existing_row_count(conn: sqlite3.Connection, org_id: str) -> int:
    """Rows the organization already holds across the seeded tables (mixes into the seed's RNG)."""
    row = conn.execute(
        """SELECT (SELECT count(*) FROM kols WHERE org_id = :org)
                + (SELECT count(*) FROM campaigns WHERE org_id = :org)
                + (SELECT count(*) FROM products WHERE org_id = :org)
                + (SELECT count(*) FROM signals WHERE org_id = :org)
                + (SELECT count(*) FROM events WHERE org_id = :org)""",
        {"org": org_id},
    ).fetchone()
    return int(row[0])


def existing_emails(conn: sqlite3.Connection, org_id: str) -> set[str]:
    rows = conn.execute("SELECT email_lower FROM kols WHERE org_id = ? AND email_lower IS NOT NULL", (org_id,))
    return {r[0] for r in rows}


def existing_products(conn: sqlite3.Connection, org_id: str) -> list[tuple[str, str, str]]:
    """(id, name, product line name) of the organization's products, oldest first."""
    rows = conn.execute(
        """SELECT p.id, p.name, coalesce(pl.name, '') FROM products p
           LEFT JOIN product_lines pl ON pl.id = p.product_line_id
           WHERE p.org_id = ? ORDER BY p.created_at, p.id""",
        (org_id,),
    )
    return [(r[0], r[1], r[2]) for r in rows]


def existing_product_lines(conn: sqlite3.Connection, org_id: str) -> dict[str, str]:
    """Product line name -> id, so a second seed reuses the lines instead of duplicating them."""
    rows = conn.execute("SELECT name, id FROM product_lines WHERE org_id = ? ORDER BY id", (org_id,))
    return {r[0]: r[1] for r in rows}
