"""Set-based SQL for the seed's bulk load.

The seed writes rows directly, one `executemany` per table and chunk, and emits no
webhook events: it is a bulk load, not activity. Column order of each INSERT is
the tuple order the generator in service/seed.py produces.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from service.store import db, search

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
    a seed interrupted that way is simply run again into a fresh database. The page cache
    stays db.connect's 64 MB and sorts (CREATE INDEX) spill to temporary files: with ids
    that increase, a larger cache saved no time at 1M KOLs and cost 230 MB.
    """
    conn.execute("PRAGMA synchronous = OFF")


def complete(table: str, rows: Iterable[Sequence[object]]) -> list[tuple[object, ...]]:
    """`rows` (tuples in COLUMNS[table] order) as insert_rows takes them: with their search_text
    when the table is searchable."""
    if table in search.FIELDS:
        return list(search.with_text(table, COLUMNS[table], rows))
    return [tuple(row) for row in rows]


def insert_rows(conn: sqlite3.Connection, table: str, rows: Iterable[Sequence[object]]) -> None:
    """Insert completed `rows` (see complete) inside the caller's transaction."""
    conn.executemany(_INSERTS[table], rows)


def drop_indexes_of_empty_tables(conn: sqlite3.Connection) -> bool:
    """Drop the non-unique indexes of the seeded tables when every one of them is empty (none of
    their rows would miss an index); True when dropped. The schema script creates them again."""
    if any(conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() for table in COLUMNS):
        return False
    tables = ", ".join(f"'{table}'" for table in COLUMNS)
    names = [row[0] for row in conn.execute(
        f"SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN ({tables}) AND sql IS NOT NULL "
        "AND sql NOT LIKE 'CREATE UNIQUE%'")]
    with db.transaction(conn):
        for name in names:
            conn.execute(f"DROP INDEX {name}")
    return bool(names)


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
