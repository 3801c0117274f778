"""KOL detail enrichment: GET /v1/kols/{id} for KOLs that are new or changed since last time.

The list shape lacks bio, notes, research interests, social, contact address and metrics;
`kol_details` holds them, one row per KOL, with the KOL's updated_at at fetch time. A KOL is
pending when it is active and has no detail row or its kols.updated_at is newer. Each run
fetches at most `limit` details (and never more than the run's remaining request budget),
oldest pending first, and reports how many remain; running out of budget never fails a run.
A KOL whose id is not a spec id (`kol_` followed by letters, digits, _ or -) is never fetched: the
run counts and names it (`details_skipped_bad_ids`), and the `kols` id check flags its row.
"""


import time
from dataclasses import dataclass

import dagster as dg
from pydantic import Field

from sync.catalog import KOL_DETAIL_FIELDS_IN_KOLS, KOL_DETAILS, KOLS
from assets.partitions import ORGS, partition_org
from privacy.suppression import Suppression
from assets.metadata import SyncStats, catalog_reference, column_schema, markdown_profile
from sync.progress import ProgressReporter
from sync.records import RecordConverter
from sync.schemas import FETCHED_AT
from commops_spec.timestamps import utc_now
from assets.snapshot_date import snapshot_date
from resources.api import CommopsApiResource
from resources.commops_api import RequestBudgetExceeded, item_path
from resources.lake import LakeResource, StagedSnapshot
from resources.orgs_resource import OrgsResource
from resources.settings import load_settings
from resources.warehouse import WarehouseResource, WarehouseSession

BATCH = 500
_SAMPLE = 10  # skipped ids named in the log and the metadata


class KolDetailsConfig(dg.Config):
    # Details fetched per run at most; 0 skips enrichment; unset: COMMOPS_ENRICH_DETAILS_LIMIT (default 5,000).
    limit: int | None = Field(default=None, ge=0)


_STALE_SQL = f"""
    SELECT k.id FROM {KOLS.table} k LEFT JOIN {KOL_DETAILS.table} d ON d.org = k.org AND d.id = k.id
    WHERE k.org = ? AND NOT coalesce(k.is_archived, false) AND (d.id IS NULL OR k.updated_at > d.updated_at)
"""
PENDING_SQL = f"{_STALE_SQL} AND regexp_full_match(k.id, ?)"
BAD_ID_SQL = f"{_STALE_SQL} AND NOT regexp_full_match(k.id, ?)"  # never fetched


@dataclass
class _Pending:
    ids: list[str]  # oldest first, at most the run's limit
    count: int  # every pending KOL
    bad_ids: list[str]  # KOLs that would be pending but whose id is not a spec id: skipped
    rows: int  # the organization's detail rows now
    profile: str


def _pending(warehouse: WarehouseResource, context: dg.AssetExecutionContext, org: str, limit: int) -> _Pending:
    """The organization's KOLs whose detail is missing or older than the KOL, oldest first (at most
    `limit`), how many there are, and the table as it is (what the run reports when it fetches none)."""
    with warehouse.writer(context.log) as session:
        session.ensure_table(KOLS)
        session.ensure_table(KOL_DETAILS)
        params = [org, KOLS.id_pattern]
        total = session.conn.execute(f"SELECT count(*) FROM ({PENDING_SQL})", params).fetchone()[0]
        # fetchmany, not LIMIT: DuckDB 2.0.0 drops a LIMIT over this two-key LEFT JOIN when kol_details is empty.
        ids = [row[0] for row in session.conn.execute(f"{PENDING_SQL} ORDER BY k.updated_at, k.id", params).fetchmany(limit)]
        bad_ids = [row[0] for row in session.conn.execute(f"{BAD_ID_SQL} ORDER BY k.id", params).fetchall()]
        return _Pending(ids, int(total), bad_ids, *_table_now(session, org))


def _table_now(session: WarehouseSession, org: str) -> tuple[int, str]:
    return session.count(KOL_DETAILS.table, org), markdown_profile(session.conn, KOL_DETAILS.table, ["id", "bio", "updated_at"])


@dg.asset(
    key=["warehouse", "kol_details"],
    deps=[dg.AssetKey(["warehouse", "kols"])],
    partitions_def=ORGS,
    group_name="warehouse",
    kinds={"duckdb"},
    pool="warehouse",
    description=f"DuckDB table kol_details: {KOL_DETAILS.description}",
    metadata={
        "table": KOL_DETAILS.table,
        "api_path": "/v1/kols/{id}",
        **column_schema(KOL_DETAILS.schema, warehouse=True),
        **catalog_reference(KOL_DETAILS),
    },
)
def kol_details(
    context: dg.AssetExecutionContext,
    config: KolDetailsConfig,
    api: CommopsApiResource,
    orgs: OrgsResource,
    lake: LakeResource,
    warehouse: WarehouseResource,
    progress: dg.ResourceParam[ProgressReporter],
) -> dg.MaterializeResult:
    started = time.monotonic()
    limit = config.limit if config.limit is not None else load_settings().enrich_details_limit
    org = partition_org(context)
    client = api.client_for(orgs.get(org))
    before = client.stats
    budget_left = max(0, api.max_requests_per_run - before.requests)
    found = _pending(warehouse, context, org, min(limit, budget_left))
    suppression = Suppression.load(warehouse.data_dir)
    kept = [kol_id for kol_id in found.ids if not suppression.suppressed(kol_id=kol_id)]
    suppressed, found.ids = len(found.ids) - len(kept), kept  # erased people: never fetched again
    pending, rows, profile = found.count, found.rows, found.profile
    fetched, stopped_by = 0, None
    if found.ids:  # else nothing to fetch or write: the table as found is the result
        date = snapshot_date(context)
        with lake.snapshot(org, KOL_DETAILS.name, date, KOL_DETAILS.schema, key=KOL_DETAILS.key, newest_by=FETCHED_AT,
                           publish=False) as staged:  # a scratch file: details are merged, not kept in the lake
            fetched, stopped_by = _fetch(client, found.ids, staged, progress)
            staged.finish()
            with warehouse.writer(context.log) as session:
                session.ensure_table(KOL_DETAILS)
                if fetched:
                    session.merge(KOL_DETAILS, staged.relation, org=org, snapshot_date=date)
                rows, profile = _table_now(session, org)
    remaining = pending - fetched
    if found.bad_ids:
        context.log.warning(f"KOL details: {len(found.bad_ids)} KOL(s) skipped, their id is not a KOL id of the spec: "
                            f"{_sample(found.bad_ids)}")
    if limit <= 0:
        context.log.info(f"KOL details: enrichment skipped (limit 0); {pending} pending")
    elif remaining:
        why = stopped_by or f"limit {limit} per run (COMMOPS_ENRICH_DETAILS_LIMIT), budget left {budget_left}"
        context.log.warning(f"KOL details: {fetched} fetched, {remaining} still pending ({why}); the next run continues")
    stats = client.stats - before
    return dg.MaterializeResult(
        metadata={
            **SyncStats(rows=rows, duration_seconds=time.monotonic() - started, details_fetched=fetched,
                        pending_remaining=remaining).as_metadata(),
            "pending_before": pending,
            "suppressed": suppressed,
            **stats.as_metadata(),
            "details_skipped_bad_ids": len(found.bad_ids),
            "details_skipped_bad_ids_sample": dg.MetadataValue.json([item[:80] for item in found.bad_ids[:_SAMPLE]]),
            "profile": dg.MetadataValue.md(profile),
        }
    )


def _sample(ids: list[str]) -> str:
    more = f" and {len(ids) - _SAMPLE} more" if len(ids) > _SAMPLE else ""
    return ", ".join(repr(item[:80]) for item in ids[:_SAMPLE]) + more


def _fetch(client, ids: list[str], staged: StagedSnapshot, progress: ProgressReporter) -> tuple[int, str | None]:
    """Fetch details into the staged file, BATCH rows per batch, each stamped with the time it arrived
    (`_fetched_at`, and `enriched_at`). Returns (fetched, reason stopped early)."""
    converter = RecordConverter(KOL_DETAILS.schema, ignored=KOL_DETAIL_FIELDS_IN_KOLS)
    fetched, stopped_by, batch = 0, None, []
    try:
        for _, data in client.get_many([item_path(KOL_DETAILS.path, id=kol_id) for kol_id in ids], skip_missing=True):
            received = utc_now()
            batch.append({**data, "enriched_at": received, FETCHED_AT: received})
            if len(batch) >= BATCH:
                staged.write(converter.to_batch(batch))
                fetched += len(batch)
                batch = []
                progress.items("kol details", fetched, len(ids))
    except RequestBudgetExceeded as error:
        stopped_by = str(error)
    if batch:
        staged.write(converter.to_batch(batch))
        fetched += len(batch)
    if ids:
        progress.items("kol details", fetched, len(ids))
        progress.finished("kol details")
    return fetched, stopped_by
