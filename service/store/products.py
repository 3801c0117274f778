"""Products and product lines. There is no product endpoint that writes (spec 4.9);
create_product serves seeding and tests."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from commops_spec.constants import ID_PREFIXES, PRODUCT_STATUSES
from service.store import listing, search
from service.store.db import new_id, now_iso

SORT_FIELDS = ("created_at", "updated_at", "name")

_COLUMNS = (
    "products.id, products.name, products.description, products.product_line_id, pl.name AS product_line_name, "
    "products.status, products.regulatory_status, products.target_markets, products.key_features, "
    "products.specifications, products.market_status, products.created_at, products.updated_at"
)


def shape(row: sqlite3.Row) -> dict[str, Any]:
    line = None
    if row["product_line_id"] is not None:
        line = {"id": row["product_line_id"], "name": row["product_line_name"]}
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "product_line": line,
        "status": row["status"],
        "regulatory_status": row["regulatory_status"],
        "target_markets": json.loads(row["target_markets"]),
        "key_features": json.loads(row["key_features"]),
        "specifications": json.loads(row["specifications"]),
        "market_status": json.loads(row["market_status"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def ensure_product_line(conn: sqlite3.Connection, org_id: str, name: str, line_id: str | None = None) -> str:
    """The id of the organization's product line called `name`, created if needed."""
    row = conn.execute("SELECT id FROM product_lines WHERE org_id = ? AND (id = ? OR name = ?)",
                       (org_id, line_id, name)).fetchone()
    if row is not None:
        return row[0]
    line_id = line_id or new_id(ID_PREFIXES["product_line"], 10)
    conn.execute("INSERT INTO product_lines (id, org_id, name) VALUES (?, ?, ?)", (line_id, org_id, name))
    return line_id


def create_product(conn: sqlite3.Connection, org_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Insert a product. fields: name, status and optionally description, product_line
    ({name[, id]}), regulatory_status, target_markets, key_features, specifications,
    market_status, created_at."""
    status = fields.get("status", "active")
    if status not in PRODUCT_STATUSES:
        raise ValueError(f"unknown product status {status!r}")
    line = fields.get("product_line")
    line_id = ensure_product_line(conn, org_id, line["name"], line.get("id")) if line else None
    now = now_iso()
    product_id = fields.get("id") or new_id(ID_PREFIXES["product"])
    conn.execute(
        "INSERT INTO products (id, org_id, name, description, product_line_id, status, regulatory_status, "
        "target_markets, key_features, specifications, market_status, created_at, updated_at, search_text) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            product_id, org_id, fields["name"], fields.get("description"), line_id, status,
            fields.get("regulatory_status"), json.dumps(fields.get("target_markets", [])),
            json.dumps(fields.get("key_features", [])), json.dumps(fields.get("specifications", [])),
            json.dumps(fields.get("market_status", {})), fields.get("created_at", now), fields.get("updated_at", now),
            search.text("products", (fields["name"], fields.get("description"))),
        ),
    )
    return get_product(conn, org_id, product_id)


def get_product(conn: sqlite3.Connection, org_id: str, product_id: str) -> dict[str, Any]:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM products LEFT JOIN product_lines pl ON pl.id = products.product_line_id "
        "WHERE products.id = ? AND products.org_id = ?",
        (product_id, org_id),
    ).fetchone()
    if row is None:
        raise LookupError(f"No product with id {product_id!r} in this organization")
    return shape(row)


def existing_ids(conn: sqlite3.Connection, org_id: str, ids: list[str]) -> set[str]:
    rows = conn.execute(
        "SELECT id FROM products WHERE org_id = ? AND id IN (SELECT value FROM json_each(?))", (org_id, json.dumps(ids))
    )
    return {r[0] for r in rows}


def list_products(
    conn: sqlite3.Connection,
    org_id: str,
    *,
    statuses: list[str] | None = None,
    product_lines: list[str] | None = None,
    target_markets: list[str] | None = None,
    search: str | None = None,
    paging: listing.Paging = listing.Paging(),
) -> tuple[list[dict[str, Any]], int]:
    where = listing.org_rows(org_id, paging, SORT_FIELDS)
    where.any_of("status", statuses)
    where.any_of("product_line_id", product_lines)
    where.json_array_has_any("target_markets", target_markets)
    where.search("products", search)
    rows = listing.page_rows(conn, "products", _COLUMNS, where, paging,
                             alias_join="LEFT JOIN product_lines pl ON pl.id = products.product_line_id")
    return [shape(r) for r in rows], listing.count(conn, "products", where)
