"""SQL building blocks shared by the list queries: filters, deterministic order, paging.

Lists page with LIMIT/OFFSET over an index that covers (org_id, [is_archived,] sort
column, id): the inner query walks the index only and picks the page's rowids, the
outer query reads those rows. Ties on the sort column are broken by id in the same
direction, so paging a quiet dataset never repeats or skips a row.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from commops_spec.constants import DEFAULT_PER_PAGE
from service.store import search


@dataclass(frozen=True)
class Paging:
    """Which page of a list and its order; `sort` must be one of the list's SORT_FIELDS."""

    page: int = 1
    per_page: int = DEFAULT_PER_PAGE
    sort: str = "created_at"
    order: str = "desc"


@dataclass
class Where:
    clauses: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, clause: str, *params: Any) -> None:
        self.clauses.append(clause)
        self.params.extend(params)

    def any_of(self, column: str, values: Sequence[str] | None) -> None:
        """column IN (values), when values are given."""
        if values:
            self.add(f"{column} IN (SELECT value FROM json_each(?))", json.dumps(list(values)))

    def json_array_has_any(self, column: str, values: Sequence[str] | None) -> None:
        """The JSON array in column holds at least one of values."""
        if values:
            self.add(
                f"EXISTS (SELECT 1 FROM json_each({column}) j WHERE j.value IN (SELECT value FROM json_each(?)))",
                json.dumps(list(values)),
            )

    def search(self, table: str, text: str | None) -> None:
        """Case-insensitive (every script) substring of any searched field of `table`, through
        its folded search_text column (service/store/search.py); no character is a wildcard."""
        if text:
            clause, params = search.condition(table, text)
            self.add(clause, *params)

    def sql(self) -> str:
        return " AND ".join(self.clauses) if self.clauses else "1"


def org_rows(org_id: str, paging: Paging, sort_fields: tuple[str, ...]) -> Where:
    """The filter every list starts from: the organization's rows. An unknown sort field is a ValueError."""
    if paging.sort not in sort_fields:
        raise ValueError(f"unknown sort field {paging.sort!r}")
    return Where(["org_id = ?"], [org_id])


def page_rows(
    conn: sqlite3.Connection, table: str, columns: str, where: Where, paging: Paging, alias_join: str = ""
) -> list[sqlite3.Row]:
    """Rows of one page, ordered by (paging.sort, id) in paging.order.

    Deep pages: the last (sort value, id) of every page served is remembered while no
    write has committed (see _cache); a later page then seeks to the nearest known
    boundary through the index and skips only the rows after it, so walking all pages
    costs about the same per page instead of growing with the offset."""
    sort_column, per_page = paging.sort, paging.per_page
    direction = "DESC" if paging.order == "desc" else "ASC"
    offset = (paging.page - 1) * per_page
    boundaries = _cache(conn).setdefault(("pages", table, where.sql(), tuple(where.params), sort_column, direction), {})
    start = max((b for b in boundaries if b <= offset), default=0) if boundaries else 0
    seek, params = where.sql(), list(where.params)
    if start:
        seek += f" AND ({sort_column}, id) {'<' if direction == 'DESC' else '>'} (?, ?)"
        params += list(boundaries[start])
    sql = (
        f"SELECT {columns} FROM {table} {alias_join} WHERE {table}.rowid IN ("
        f"SELECT rowid FROM {table} WHERE {seek} ORDER BY {sort_column} {direction}, id {direction} LIMIT ? OFFSET ?"
        f") ORDER BY {table}.{sort_column} {direction}, {table}.id {direction}"
    )
    rows = conn.execute(sql, [*params, per_page, offset - start]).fetchall()
    if rows and len(boundaries) < _MAX_BOUNDARIES:
        boundaries[offset + len(rows)] = (rows[-1][sort_column], rows[-1]["id"])
    return rows


# Per-connection memo of counts and page boundaries, valid while no connection has
# committed since it was filled: data_version moves when another connection commits,
# total_changes when this one writes. Paging a quiet dataset then counts once and
# seeks instead of skipping; any write starts afresh.
_MAX_BOUNDARIES = 20_000
_memo: dict[int, tuple[sqlite3.Connection, tuple[int, int], dict[tuple, Any]]] = {}


def _cache(conn: sqlite3.Connection) -> dict[tuple, Any]:
    token = (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)
    owner, cached_token, cache = _memo.get(id(conn), (None, None, {}))
    if owner is not conn or cached_token != token or len(cache) > 256:
        cache = {}
        _memo[id(conn)] = (conn, token, cache)
    return cache


def count(conn: sqlite3.Connection, table: str, where: Where) -> int:
    sql = f"SELECT count(*) FROM {table} WHERE {where.sql()}"
    cache = _cache(conn)
    key = ("count", sql, tuple(where.params))
    if key not in cache:
        cache[key] = conn.execute(sql, where.params).fetchone()[0]
    return cache[key]
