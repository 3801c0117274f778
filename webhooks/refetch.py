"""Refetching what the events point at, through the run's API client: payloads say what changed, the
API says what it is now (never trusting the payloads' order or content).

A KOL is refetched with GET /v1/kols/{id}: a 404 keeps its row (the spec has no delete), and an
answer that concerns that KOL alone (a 4xx other than 401, 403, 404 and 429) fails the events
naming it and no other. Campaigns and signals are complete walks: any failure there, like an API
that stays down, fails the batch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sync.catalog import CAMPAIGNS, KOL_DETAILS, SIGNALS, ResourceSpec
from sync.schemas import FETCHED_AT
from webhooks.reshape import kol_list_shape, one_line
from webhooks.routing import Plan
from commops_spec.timestamps import format_timestamp, utc_now
from resources.commops_api import ApiClient, ApiError, NotFoundError, item_path
from resources.warehouse import WarehouseResource

SIGNAL_OVERLAP = timedelta(hours=1)  # before the earliest published_at the batch's payloads state
SIGNAL_FALLBACK_OVERLAP = timedelta(days=1)  # before the newest published signal, when they state none
_NOT_ONE_KOLS_FAULT = frozenset({401, 403, 404, 429})  # the key, its scope, a missing row, the rate limit


@dataclass
class Fetched:
    kols: list[dict[str, Any]] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    kols_not_found: list[str] = field(default_factory=list)
    kol_failures: dict[str, str] = field(default_factory=dict)  # kol id -> the error its refetch got
    campaigns: list[dict[str, Any]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    signals_since: str | None = None


def fetch_current_state(client: ApiClient, plan: Plan, warehouse: WarehouseResource, org: str, log: Any) -> Fetched:
    fetched = Fetched()
    if plan.kol_ids:
        _refetch_kols(client, plan.kol_ids, fetched)
    if fetched.kols_not_found:
        log.warning(f"KOLs gone from the API (404), rows kept as they are: {', '.join(fetched.kols_not_found)}")
    for kol_id, error in fetched.kol_failures.items():
        log.warning(f"KOL {kol_id} could not be refetched, the events naming it fail: {error}")
    if plan.campaigns:
        fetched.campaigns = _walk(client, CAMPAIGNS, {})
    if plan.signals:
        fetched.signals_since = _signal_watermark(plan, warehouse, org)
        params = {"published_after": fetched.signals_since} if fetched.signals_since else {}
        fetched.signals = _walk(client, SIGNALS, params)
    return fetched


def concerns_one_kol(error: ApiError) -> bool:
    """An answer about this KOL alone, which other KOLs of the batch do not share."""
    return error.status_code is not None and 400 <= error.status_code < 500 and error.status_code not in _NOT_ONE_KOLS_FAULT


def _refetch_kols(client: ApiClient, kol_ids: dict[str, bool], fetched: Fetched) -> None:
    """GET /v1/kols/{id} for every KOL, `client.max_concurrency` at a time, each outcome kept apart."""
    with ThreadPoolExecutor(max_workers=client.max_concurrency, thread_name_prefix="kol-refetch") as pool:
        futures = {pool.submit(client.get, item_path(KOL_DETAILS.path, id=kol_id)): kol_id for kol_id in kol_ids}
        try:
            for future in as_completed(futures):
                kol_id = futures[future]
                try:
                    detail = future.result()
                except NotFoundError:
                    fetched.kols_not_found.append(kol_id)
                    continue
                except ApiError as error:
                    if not concerns_one_kol(error):
                        raise
                    fetched.kol_failures[kol_id] = one_line(error)
                    continue
                received = utc_now()
                fetched.kols.append({**kol_list_shape(detail, archived_by_event=kol_ids[kol_id]), FETCHED_AT: received})
                fetched.details.append({**detail, "enriched_at": received, FETCHED_AT: received})
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    fetched.kols_not_found.sort()


def _walk(client: ApiClient, spec: ResourceSpec, params: dict[str, str]) -> list[dict[str, Any]]:
    """Every item of a complete walk, each stamped with the time its page arrived (`_fetched_at`)."""
    items: list[dict[str, Any]] = []
    for page in client.walk(spec.path, params, sort=spec.sort).pages():
        received = format_timestamp(page.received_at)
        items.extend({**item, FETCHED_AT: received} for item in page.items)
    return items


def _signal_watermark(plan: Plan, warehouse: WarehouseResource, org: str) -> str | None:
    """published_after for the signal walk: the batch's earliest stated published_at minus an hour,
    else the newest published signal minus a day; None (every signal) when neither exists.

    The newest signal is read from the published analytics.duckdb, read-only: the warehouse itself
    would need the writer lock (and a checkpoint) for one max(). The copy can only trail the
    warehouse, which moves the watermark earlier: more signals walked, none missed."""
    if plan.signal_published:
        return format_timestamp(min(plan.signal_published) - SIGNAL_OVERLAP)
    rows = warehouse.read_published(SIGNALS.table, f"SELECT max(published_at) FROM {SIGNALS.table} WHERE org = ?", [org])
    newest = rows[0][0] if rows else None
    return None if newest is None else format_timestamp(newest - SIGNAL_FALLBACK_OVERLAP)
