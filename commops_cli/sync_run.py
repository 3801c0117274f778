"""`run_sync`: the nightly_sync job executed in-process for one snapshot date, summarised.

Used by `commops sync` (and `commops demo`). Failures become a `SyncError` with one clear
line (the API client's message for 401/403); a missing or invalid setting a `SettingsError`
naming its variable.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from alerts.commands import review_after_run
from assets import snapshot_date as dates
from assets.metadata import SyncStats
from assets.sync_health import record_sync_health
from sync.progress import ProgressReporter
from resources.commops_api import RequestStats
from resources.files import LockHeld, holding_lock
from pipelines.definitions import build_resources
from commops_cli.sync_checks import BlockingChecksFailed, CheckedSync, SyncError, check_sync
from commops_cli.in_process import CheckFailure, JobRun, Materialization, job_runner
from pipelines.jobs import NIGHTLY_SYNC
from resources.lake import LAKE_DIR
from resources.orgs import DEFAULT_ORG
from resources.settings import API_KEY_ENV
from resources.warehouse import ANALYTICS_FILE, WAREHOUSE_FILE, WarehouseResource
from resources.inbox import inbox_location

KOL_DETAILS_OP = "warehouse__kol_details"


class _StderrHandler(logging.Handler):
    """One plain line per message on the current sys.stderr (which a live progress display wraps)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr)


@dataclass
class AssetSummary:
    asset: str
    rows: int | None = None
    requests: int | None = None
    rate_limited: int | None = None
    retries: int | None = None
    throttled_seconds: float | None = None
    duration_seconds: float | None = None
    note: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)  # every metadata entry, as plain values


@dataclass
class SyncSummary:
    snapshot_date: str
    data_dir: Path
    run_id: str
    org: str = DEFAULT_ORG
    assets: list[AssetSummary] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)
    check_failures: list[CheckFailure] = field(default_factory=list)  # the failed checks: all warnings (it landed)
    duration_seconds: float = 0.0

    @property
    def warehouse_path(self) -> Path:
        return self.data_dir / WAREHOUSE_FILE

    @property
    def analytics_path(self) -> Path:
        return self.data_dir / ANALYTICS_FILE

    @property
    def lake_path(self) -> Path:
        return self.data_dir / LAKE_DIR

    def asset(self, name: str) -> AssetSummary:
        return next(a for a in self.assets if a.asset == name)


def run_sync(
    snapshot_date: str | None = None,
    base_url: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    progress: bool | ProgressReporter = True,
    enrich_details_limit: int | None = None,
    instance: dg.DagsterInstance | None = None,
    max_concurrency: int = 4,
    api_key_env: str = API_KEY_ENV,
    org: str = DEFAULT_ORG,
    marts: bool = True,
    checked: CheckedSync | None = None,
) -> SyncSummary:
    """Run `nightly_sync` for one organization (its partition) in this process; its snapshot is dated
    today (COMMOPS_TIMEZONE).

    Every argument left None comes from the settings (the COMMOPS_* environment). `org` is a registered
    organization, or `default`: the environment's COMMOPS_BASE_URL / `api_key_env` (`base_url` overrides
    the address). `snapshot_date`, when given, must be today's date. API keys are read from their
    environment variables by the API resource itself, so they never enter Dagster's storage. Without
    `instance`, the run is recorded in the Dagster home the UI reads (`commops ui`). Without `marts`, the
    run leaves the dbt marts as they are (for `commops marts build` once after several organizations). `checked`:
    what `check_sync` returned for these arguments, when the caller checked them first."""
    checked = checked or check_sync(snapshot_date, base_url, data_dir, api_key_env, org)
    settings, registry = checked.settings, checked.registry

    if isinstance(progress, ProgressReporter):
        reporter, display = progress, nullcontext()
    elif progress:
        from commops_cli.progress_display import RichProgress

        reporter = display = RichProgress()
    else:
        reporter, display = ProgressReporter(), nullcontext()

    resources = build_resources(settings, api_key_env=api_key_env, progress=reporter, max_concurrency=max_concurrency)
    # Only an explicit limit is run config; otherwise kol_details reads COMMOPS_ENRICH_DETAILS_LIMIT
    # itself, as it does in a scheduled run: one path for the setting.
    run_config = ({"ops": {KOL_DETAILS_OP: {"config": {"limit": enrich_details_limit}}}}
                  if enrich_details_limit is not None else {})
    with one_sync_per_org(settings.data_dir, org), job_runner(settings, resources, instance, marts=marts) as runner:
        with display, commops_notices():
            run = runner.run(NIGHTLY_SYNC, run_config=run_config, partition=org)
            review_after_run(runner.instance, run.run_id, inbox_location(settings.data_dir),
                             registry.all())
            if not run.success:
                _record_failed_run(runner.instance, run.run_id, resources["warehouse"])
        if not run.success:
            raise (BlockingChecksFailed if run.blocking_failures else SyncError)(run.failure)
        snapshot_date = dates.run_snapshot_date(runner.instance, run.run_id)
    return _summarise(run, snapshot_date, settings.data_dir, org)


def _record_failed_run(instance: dg.DagsterInstance, run_id: str, warehouse: WarehouseResource) -> None:
    """A failed run's sync_runs and table_loads rows, in the warehouse and analytics.duckdb; a problem doing so
    is one line on stderr and never changes how the command ends."""
    try:
        record_sync_health(instance, run_id, warehouse, publish=True)
    except Exception as error:  # noqa: BLE001 (the run's own failure is what the command reports)
        print(f"sync health not recorded: {(str(error).strip().splitlines() or [type(error).__name__])[0]}",
              file=sys.stderr)


@contextmanager
def one_sync_per_org(data_dir: Path, org: str) -> Iterator[None]:
    """At most one in-process sync of an organization at a time (a deployment's run queue does the same
    for queued runs, by partition); a second one fails at once, naming the process that holds it."""
    try:
        with holding_lock(Path(data_dir) / "locks" / f"sync-{org}.lock"):
            yield
    except LockHeld as held:
        raise SyncError(f"a sync of {org} is already running ({held.holder}): "
                        "one sync per organization at a time") from None


@contextmanager
def commops_notices() -> Iterator[None]:
    """The pipeline's own notices (e.g. waiting for the warehouse lock) as plain lines on stderr, while
    Dagster's console log is silenced."""
    handler = _StderrHandler(logging.INFO)
    notices = logging.getLogger("commops")
    notices.addHandler(handler)
    notices.setLevel(logging.INFO)
    try:
        yield
    finally:
        notices.removeHandler(handler)


def _summarise(run: JobRun, snapshot_date: str, data: Path, org: str) -> SyncSummary:
    return SyncSummary(
        snapshot_date=snapshot_date,
        data_dir=data,
        run_id=run.run_id,
        org=org,
        assets=[_asset_summary(m) for m in run.materializations],
        failed_checks=run.failed_checks,
        check_failures=run.check_failures,
        duration_seconds=run.duration_seconds,
    )


def _asset_summary(materialization: Materialization) -> AssetSummary:
    stats = SyncStats.from_metadata(materialization.metadata) or SyncStats()
    spent = RequestStats.from_metadata(materialization.metadata)  # None: the asset made no requests
    return AssetSummary(
        asset=materialization.asset.to_user_string(),
        rows=stats.rows,
        requests=None if spent is None else spent.requests,
        rate_limited=None if spent is None else spent.rate_limited,
        retries=None if spent is None else spent.retries,
        throttled_seconds=None if spent is None else spent.throttled_seconds,
        duration_seconds=stats.duration_seconds,
        note=_note(stats),
        metadata=materialization.metadata,
    )


def _note(stats: SyncStats) -> str:
    if stats.pending_remaining:
        return f"{stats.details_fetched} fetched, {stats.pending_remaining} pending for next runs"
    if stats.details_fetched is not None:
        return f"{stats.details_fetched} fetched"
    if stats.rows_in_flux:
        return f"{stats.rows_in_flux} in flux (created or archived while paging)"
    return ""
