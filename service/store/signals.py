"""Regulatory and industry signals."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from commops_spec.constants import ID_PREFIXES, IMPACT_LEVELS, SENTIMENTS, SIGNAL_SOURCES
from service.store import listing, outbox, search
from service.store.db import new_id, now_iso

SORT_FIELDS = ("published_at", "fetched_at", "updated_at", "impact_score")

_COLUMNS = (
    "id, title, url, source_key, source_name, source_country, source_region, content, ai_summary, impact_level, "
    "impact_score, impact_categories, sentiment, product_relevance, is_read, is_bookmarked, published_at, "
    "fetched_at, updated_at"
)


def shape(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "title": row["title"],
        "url": row["url"],
        "source": {"name": row["source_name"], "country": row["source_country"], "region": row["source_region"]},
        "content": row["content"],
        "ai_summary": row["ai_summary"],
        "impact": {
            "level": row["impact_level"],
            "score": row["impact_score"],
            "categories": json.loads(row["impact_categories"]),
        },
        "sentiment": row["sentiment"],
        "product_relevance": json.loads(row["product_relevance"]),
        "is_read": bool(row["is_read"]),
        "is_bookmarked": bool(row["is_bookmarked"]),
        "published_at": row["published_at"],
        "fetched_at": row["fetched_at"],
        "updated_at": row["updated_at"],
    }


def get_signal(conn: sqlite3.Connection, org_id: str, signal_id: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_COLUMNS} FROM signals WHERE id = ? AND org_id = ?", (signal_id, org_id)).fetchone()
    if row is None:
        raise LookupError(f"No signal with id {signal_id!r} in this organization")
    return shape(row)


def ingest_signal(conn: sqlite3.Connection, org_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Store a detected signal; emits signal.new, and signal.high_impact when its level is
    high or critical. fields: title, source_key (a filter token), source {name, country,
    region}, impact {level, score, categories}, sentiment, and optionally url, content,
    ai_summary, product_relevance, is_read, is_bookmarked, published_at, fetched_at."""
    source_key = fields["source_key"]
    impact = fields["impact"]
    if source_key not in SIGNAL_SOURCES:
        raise ValueError(f"unknown signal source {source_key!r}")
    if impact["level"] not in IMPACT_LEVELS:
        raise ValueError(f"unknown impact level {impact['level']!r}")
    if fields["sentiment"] not in SENTIMENTS:
        raise ValueError(f"unknown sentiment {fields['sentiment']!r}")
    source = fields.get("source") or {}
    relevance = fields.get("product_relevance") or []
    now = now_iso()
    signal_id = fields.get("id") or new_id(ID_PREFIXES["signal"])
    conn.execute(
        f"INSERT INTO signals ({_COLUMNS}, org_id, search_text) VALUES ({', '.join('?' * 21)})",
        (
            signal_id, fields["title"], fields.get("url"), source_key, source.get("name", source_key.upper()),
            source.get("country"), source.get("region"), fields.get("content"), fields.get("ai_summary"),
            impact["level"], float(impact.get("score", 0)), json.dumps(impact.get("categories", [])),
            fields["sentiment"], json.dumps(relevance), int(bool(fields.get("is_read"))),
            int(bool(fields.get("is_bookmarked"))), fields.get("published_at", now), fields.get("fetched_at", now),
            fields.get("updated_at", now), org_id, search.text("signals", (fields["title"], fields.get("content"))),
        ),
    )
    product_ids = {item["product_id"] for item in relevance if item.get("product_id")}
    conn.executemany(
        "INSERT OR IGNORE INTO signal_products (signal_id, product_id, org_id) VALUES (?, ?, ?)",
        [(signal_id, pid, org_id) for pid in sorted(product_ids)],
    )
    signal = get_signal(conn, org_id, signal_id)
    outbox.emit(conn, org_id, "signal.new", signal)
    if impact["level"] in ("high", "critical"):
        outbox.emit(conn, org_id, "signal.high_impact", signal)
    return signal


def list_signals(
    conn: sqlite3.Connection,
    org_id: str,
    *,
    sources: list[str] | None = None,
    impacts: list[str] | None = None,
    sentiments: list[str] | None = None,
    product_ids: list[str] | None = None,
    is_bookmarked: bool | None = None,
    is_read: bool | None = None,
    search: str | None = None,
    published_after: str | None = None,
    paging: listing.Paging = listing.Paging(sort="published_at"),
) -> tuple[list[dict[str, Any]], int, int]:
    """One page of signals, the number matching, and how many of those are unread."""
    where = listing.org_rows(org_id, paging, SORT_FIELDS)
    where.any_of("source_key", sources)
    where.any_of("impact_level", impacts)
    where.any_of("sentiment", sentiments)
    if product_ids:
        where.add(
            "id IN (SELECT signal_id FROM signal_products WHERE org_id = ? AND product_id IN "
            "(SELECT value FROM json_each(?)))",
            org_id, json.dumps(product_ids),
        )
    if is_bookmarked is not None:
        where.add("is_bookmarked = ?", int(is_bookmarked))
    if is_read is not None:
        where.add("is_read = ?", int(is_read))
    where.search("signals", search)
    if published_after:
        where.add("published_at > ?", published_after)
    rows = listing.page_rows(conn, "signals", _COLUMNS, where, paging)
    unread = listing.Where(list(where.clauses), list(where.params))
    unread.add("is_read = 0")
    return [shape(r) for r in rows], listing.count(conn, "signals", where), listing.count(conn, "signals", unread)
