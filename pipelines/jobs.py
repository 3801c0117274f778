"""Jobs: `nightly_sync` materializes the whole snapshot graph for one snapshot date (the day the
run was created); `apply_webhook_events` applies a batch of webhook events from the inbox
(requested by `webhook_events_sensor`, or run by `commops events apply`); `crm_reconciliation`
reconciles the warehouse's KOLs with the CRM (its schedule, or `commops reconcile`); `refresh_marts` rebuilds
the analysts' marts and publishes them (requested by `marts_refresh_sensor` after webhook and CRM runs, or run
by `commops marts build`)."""

from __future__ import annotations

import dagster as dg

from assets.sync_health import NIGHTLY_SYNC
from assets.webhooks import APPLIED_KEY, WEBHOOK_EVENTS_KEY
from pipelines.hooks import count_step_failure

APPLY_WEBHOOK_EVENTS = "apply_webhook_events"
CRM_RECONCILIATION = "crm_reconciliation"
REFRESH_MARTS = "refresh_marts"

_WEBHOOK_ONLY = dg.AssetSelection.assets(WEBHOOK_EVENTS_KEY, APPLIED_KEY)
_CRM = dg.AssetSelection.groups("crm")

# in_process_executor: every step runs in the run's process, so one API client (one rate
# budget, one request cap) serves the whole run.
nightly_sync = dg.define_asset_job(
    NIGHTLY_SYNC,
    selection=dg.AssetSelection.all() - _WEBHOOK_ONLY - _CRM,
    executor_def=dg.in_process_executor,
    description="One organization (the run's partition): snapshot the four API resources to Parquet, merge them "
    "into DuckDB, enrich KOL details, publish analytics.duckdb.",
)

# Apply -> publish -> mark: the inbox is marked only after analytics.duckdb holds the changes. A failed
# step counts against the run's events (pipelines/hooks.py).
apply_webhook_events = dg.define_asset_job(
    APPLY_WEBHOOK_EVENTS,
    selection=dg.AssetSelection.assets(WEBHOOK_EVENTS_KEY, ["analytics"], APPLIED_KEY),
    executor_def=dg.in_process_executor,
    hooks={count_step_failure},
    description="Apply pending webhook events (refetch what they name, merge into the warehouse), publish analytics.duckdb, mark them applied.",
)

# The CRM job reads the KOL table the last nightly run left; a CRM outage never fails the nightly sync.
crm_reconciliation = dg.define_asset_job(
    CRM_RECONCILIATION,
    selection=_CRM | dg.AssetSelection.assets(["analytics"]),
    executor_def=dg.in_process_executor,
    description="Extract the CRM's contacts, reconcile them with the KOLs by email, write the reports, plan (or apply) "
    "the write-back, publish analytics.duckdb.",
)

# Not partitioned: the marts span every organization. A request may select the marts that read what changed.
refresh_marts = dg.define_asset_job(
    REFRESH_MARTS,
    selection=dg.AssetSelection.groups("marts") | dg.AssetSelection.assets(["analytics"]),
    executor_def=dg.in_process_executor,
    description="Rebuild the analysts' marts (dbt) from the warehouse as it stands, swap them in when their ERROR "
    "tests pass, publish analytics.duckdb.",
)

JOBS = [nightly_sync, apply_webhook_events, crm_reconciliation, refresh_marts]
