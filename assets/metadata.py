"""Materialization metadata shared by the assets: request counters and markdown previews."""

from __future__ import annotations

from typing import Any

import dagster as dg
import duckdb

from resources.commops_api import RequestStats


def request_metadata(stats: RequestStats) -> dict[str, Any]:
    """An asset's share of the run's requests (a difference of two client.stats snapshots)."""
    return {
        "requests": stats.requests,
        "rate_limited_429s": stats.rate_limited,
        "throttled_seconds": dg.MetadataValue.float(round(stats.throttled_seconds, 3)),
        "retries": stats.retries,
    }


def markdown_preview(conn: duckdb.DuckDBPyConnection, relation: str, columns: list[str], limit: int = 5) -> str:
    rows = conn.execute(f"SELECT {', '.join(columns)} FROM {relation} ORDER BY 1 LIMIT {limit}").fetchall()
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v).replace("|", "/")[:60] for v in row) + " |" for row in rows]
    return "\n".join(lines)
