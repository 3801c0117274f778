"""Jobs: `nightly_sync` materializes the whole asset graph for one snapshot date
(the snapshot date is the day the run was created)."""

from __future__ import annotations

import dagster as dg


NIGHTLY_SYNC = "nightly_sync"

# in_process_executor: every step runs in the run's process, so one API client (one rate
# budget, one request cap) serves the whole run.
nightly_sync = dg.define_asset_job(
    NIGHTLY_SYNC,
    selection=dg.AssetSelection.all(),
    executor_def=dg.in_process_executor,
    description="Snapshot the four API resources to Parquet, merge them into DuckDB, enrich KOL details, publish analytics.duckdb.",
)

JOBS = [nightly_sync]
