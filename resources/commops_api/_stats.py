"""What a client has spent so far: requests, retries, rate limiting, pages."""

from __future__ import annotations

from dataclasses import dataclass, fields

from resources.metadata_record import MetadataRecord, reported_as, unreported


@dataclass(frozen=True)
class RequestStats(MetadataRecord):
    """A snapshot of a client's counters. Subtract two snapshots to get one asset's share of a run,
    which the asset reports in its materialization metadata (`as_metadata`)."""

    requests: int = 0  # HTTP requests sent, retries and rate-limited attempts included
    retries: int = 0  # attempts repeated after a transient failure (5xx, timeout, dropped connection, broken body)
    rate_limited: int = reported_as("rate_limited_429s", default=0)  # 429 answers met
    throttled_seconds: float = 0.0  # wall time the run spent waiting for the rate limit (pacing and 429s)
    pages: int = unreported(default=0)  # list pages received

    def __sub__(self, earlier: RequestStats) -> RequestStats:
        return RequestStats(**{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)})
