"""Materialization metadata shared by the assets: request counters and markdown previews."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg
import duckdb


@dataclass
class RunStats:
    """Request counters of the run's shared API client, as a delta over one asset."""

    requests: int = 0
    rate_limited: int = 0
    throttled_seconds: float = 0.0
    retries: int = 0

    @classmethod
    def of(cls, client: Any) -> RunStats:
        s = client.stats
        return cls(s.requests, s.rate_limited, s.throttled_seconds, s.retries)

    def since(self, before: RunStats) -> RunStats:
        return RunStats(
            self.requests - before.requests,
            self.rate_limited - before.rate_limited,
            round(self.throttled_seconds - before.throttled_seconds, 3),
            self.retries - before.retries,
        )

    def metadata(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "rate_limited_429s": self.rate_limited,
            "throttled_seconds": dg.MetadataValue.float(float(self.throttled_seconds)),
            "retries": self.retries,
        }


def markdown_preview(conn: duckdb.DuckDBPyConnection, relation: str, columns: list[str], limit: int = 5) -> str:
    rows = conn.execute(f"SELECT {', '.join(columns)} FROM {relation} ORDER BY 1 LIMIT {limit}").fetchall()
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v).replace("|", "/")[:60] for v in row) + " |" for row in rows]
    return "\n".join(lines)
