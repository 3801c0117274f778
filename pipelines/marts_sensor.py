"""`marts_refresh_sensor`: the marts follow incremental runs on a cadence, not inside each run.

The nightly sync builds every mart after its merges. Between nights, webhook runs (and the CRM reconciliation)
write warehouse tables the marts read; the sensor compares, for each mart, the latest materialization of each
table it reads with its own latest build, and when one is newer and the last build of any mart is at least
COMMOPS_MARTS_REFRESH_MINUTES old, requests `refresh_marts` for those marts (with their staging views, and
`analytics`, which publishes them). The raw tables stay on the webhook runs' fast path; the marts trail them
by at most the cadence (plus the build), and `kol_360.as_of` says when they were built.

default_status RUNNING, as the webhook sensor: marts that trail by hours while events arrive would answer
questions with yesterday's engagement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dagster as dg

from assets.analytics import ANALYTICS_KEY
from assets.mart_keys import MART_KEYS, STAGING_KEYS
from pipelines.jobs import REFRESH_MARTS

# What the marts read, but the lake's KOL snapshots (kol_history): those change only in the nightly run.
_NIGHTLY_ONLY = {dg.AssetKey(["lake", "kols"])}
_DBT_MODELS = {*MART_KEYS, *STAGING_KEYS}


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey) -> float | None:
    """Time of the latest materialization of `key`, in any partition."""
    event = instance.get_latest_materialization_event(key)
    return None if event is None else event.timestamp


def stale_marts(instance: dg.DagsterInstance, graph: Any) -> list[dg.AssetKey]:
    """The marts some table they read was materialized after (each against its own latest build)."""
    stale = []
    for mart in MART_KEYS:
        built = _latest(instance, mart)
        # The tables its sources name: the mart's parents, or its staging views' (depth 2).
        inputs = dg.AssetSelection.assets(mart).upstream(depth=2).resolve(graph) - _DBT_MODELS - _NIGHTLY_ONLY
        if any((t := _latest(instance, key)) is not None and (built is None or t > built) for key in inputs):
            stale.append(mart)
    return stale


def build_marts_refresh_sensor(refresh_minutes: int, clock: Callable[[], float] = time.time) -> dg.SensorDefinition:
    """The sensor at a cadence of `refresh_minutes`; `clock` (seconds since the epoch) is the time it compares
    the last build with."""
    @dg.sensor(
        name="marts_refresh_sensor",
        job_name=REFRESH_MARTS,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Rebuilds the marts that read tables changed since their last build (webhook or CRM runs), "
        f"at most every {refresh_minutes} minutes (COMMOPS_MARTS_REFRESH_MINUTES).",
    )
    def marts_refresh_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        graph = context.repository_def.asset_graph
        stale = stale_marts(context.instance, graph)
        if not stale:
            return dg.SkipReason("the marts are up to date with the tables they read")
        now = clock()
        built = max((t for t in (_latest(context.instance, key) for key in MART_KEYS) if t is not None), default=None)
        if built is not None and now - built < refresh_minutes * 60:
            return dg.SkipReason(f"{len(stale)} mart(s) behind; the next build in "
                                 f"{int(refresh_minutes * 60 - (now - built))} s (the cadence)")
        wanted = dg.AssetSelection.assets(*stale).upstream() & dg.AssetSelection.groups("marts")
        return dg.SensorResult(run_requests=[dg.RunRequest(
            run_key=f"marts-{int(now)}",
            asset_selection=[*sorted(wanted.resolve(graph), key=lambda k: k.path), ANALYTICS_KEY],
            tags={"commops/stale_marts": ",".join(key.path[-1] for key in stale)},
        )])

    return marts_refresh_sensor
