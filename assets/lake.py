"""Lake snapshot assets: each catalog resource paged from the API into one Parquet snapshot.

Per catalog resource: every list of the API (KOLs: active and archived) is paged by one listing
(resources/commops_api/_paging.py: it proves what it holds even while rows are created and archived),
converted page by page into Arrow (each row stamped with `_fetched_at`, the time its page arrived, and
hashed into `_digest`, its content's hash), streamed into a snapshot staged by LakeResource, checked,
and only then published to `lake/<resource>/snapshot_date=YYYY-MM-DD/data.parquet`: a crashed run leaves no partial
snapshot, a re-run of the day replaces it atomically. The run's metadata says what was proven and
names the rows in flux (created or archived while the lists were paged).
"""


import functools
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from assets import checks
from privacy.suppression import Suppression, drop_suppressed
from sync.catalog import BY_NAME, CATALOG, FETCH_ORDER, KOLS, ResourceSpec
from assets.partitions import ORGS, partition_org
from assets.metadata import SyncStats, catalog_reference, column_schema, listing_metadata, markdown_profile
from sync.progress import ProgressReporter
from sync.records import RecordConverter
from sync.schemas import FETCHED_AT
from assets.snapshot_date import snapshot_date as run_snapshot_date
from assets.warehouse import hand_merge_to_background, next_fetch_in_run, snapshot_key
from resources.api import CommopsApiResource
from resources.changed_rows import ChangedRows
from resources.commops_api import ApiClient, Listing, ListSource, Page, RequestStats
from resources.digest import content_fields
from resources.lake import LakeResource
from resources.orgs_resource import OrgsResource
from resources.warehouse import WarehouseResource

# Pages of the next list read ahead while a step ends and the next starts (a few megabytes of Arrow): with the
# walk's own 32 requested pages, about 0.3 s of fetching at full speed, more than Dagster's pause between steps.
READ_AHEAD_PAGES = 64


def _page_batch(page: Page, converter: RecordConverter) -> pa.RecordBatch:
    """The page's rows, each stamped with the time its page was received (the row's _fetched_at): the
    batch the fetching thread decoded, or the page's dicts converted here."""
    if page.batch is None:
        received = page.received_at.isoformat()
        for record in page.items:
            record[FETCHED_AT] = received
        return converter.to_batch(page.items)
    index = page.batch.schema.get_field_index(FETCHED_AT)
    stamp = pa.array([page.received_at] * page.batch.num_rows, page.batch.schema.field(index).type)
    return page.batch.set_column(index, page.batch.schema.field(index), stamp)


def _changed_rows_metadata(changes: ChangedRows | None) -> dict[str, Any]:
    """How many rows differ from the snapshot before (the side file the merge reads them from), when compared."""
    if changes is None or changes.abandoned:
        return {}
    return {"rows_changed_since_previous": changes.rows_changed}


def _blocking_checks_passed(spec: ResourceSpec, key: dg.AssetKey, results: list[dg.AssetCheckResult]) -> bool:
    """Whether the table may be merged: a failed blocking check stops the steps downstream, merges included."""
    blocking = {c.name for c in checks.snapshot_check_specs(spec, key) if c.blocking}
    return all(r.passed for r in results if r.check_name in blocking)


@dataclass
class _ListFetch:
    """One resource's listing for the run's organization and its pages' converters: started by the
    resource's own step, or read ahead by the step before it (`read_ahead`)."""

    listing: Listing
    sources: list[ListSource]
    converters: dict[str, RecordConverter]
    started: float  # time.monotonic() when it was started
    before: RequestStats  # the client's counts then: the listing's requests are the difference at its end
    read_ahead: bool

    def close(self) -> None:
        self.listing.close()


def _start_fetch(client: ApiClient, spec: ResourceSpec, progress: ProgressReporter, *, ahead: int = 0) -> _ListFetch:
    """The listing of `spec`'s lists, walked by its reader, or with `ahead` pages read ahead on a thread now."""
    started, before = time.monotonic(), client.stats
    sources = spec.list_sources()
    converters = {
        source.label: RecordConverter(spec.schema, defaults=defaults)
        for source, defaults in zip(sources, spec.walk_defaults, strict=True)
    }
    listing = client.listing(
        spec.path, sources, sort=spec.sort, lookup_path=spec.lookup_path,
        progress=lambda label: functools.partial(progress.pages, label),
        decoders={label: converter.decode_pages for label, converter in converters.items()},
    )
    if ahead:
        listing.read_ahead(depth=ahead)
    return _ListFetch(listing, sources, converters, started, before, read_ahead=bool(ahead))


def _read_next_ahead(context: dg.AssetExecutionContext, spec: ResourceSpec, api: CommopsApiResource, client: ApiClient,
                     org: str, progress: ProgressReporter) -> None:
    """Start the run's next list now, on its own thread: its pages arrive while this step publishes its
    snapshot and Dagster starts the next step, instead of the fetch pausing at every step."""
    following = next_fetch_in_run(context, spec.name)
    if following is None:
        return
    api.keep_read_ahead(org, following, _start_fetch(client, BY_NAME[following], progress, ahead=READ_AHEAD_PAGES))


def snapshot(
    context: dg.AssetExecutionContext,
    spec: ResourceSpec,
    api: CommopsApiResource,
    orgs: OrgsResource,
    lake: LakeResource,
    progress: ProgressReporter,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Page every list of `spec` for the run's organization into a staged snapshot, check it, publish it;
    then hand its table's merge to the warehouse's background writer (when this run merges it next).
    Once its pages are in, the run's next list is read ahead."""
    snapshot_date = run_snapshot_date(context)
    org = partition_org(context)
    client = api.client_for(orgs.get(org))
    fetch = api.take_read_ahead(org, spec.name) or _start_fetch(client, spec, progress)
    listing, converters = fetch.listing, fetch.converters
    suppression = Suppression.load(lake.data_dir) if spec.name == KOLS.name else Suppression(None, frozenset())
    suppressed = 0
    with lake.snapshot(org, spec.name, snapshot_date, spec.schema, key=spec.key, newest_by=FETCHED_AT,
                       digest=content_fields(spec.schema, spec.observed), sorted_by=spec.sort) as staged:
        try:
            for source, page in listing.pages():
                batch, dropped = drop_suppressed(_page_batch(page, converters[source.label]), suppression)
                suppressed += dropped  # erased people (commops privacy erase): never written
                staged.write(batch)
        finally:
            fetch.close()
        stats = client.stats - fetch.before  # before the next list's requests start
        _read_next_ahead(context, spec, api, client, org, progress)
        for source in fetch.sources:
            progress.finished(source.label)
        report = listing.report
        rows = staged.finish(drop=listing.drop_ids, repeated_ids=bool(report.moved))
        check_results = checks.run_snapshot_checks(staged.conn, spec, staged.relation, report, suppressed=suppressed)
        profile = markdown_profile(staged.conn, staged.relation, [f.name for f in spec.schema][:4])
    handed = False
    if _blocking_checks_passed(spec, context.asset_key, check_results):
        handed = hand_merge_to_background(context, spec, lake, warehouse)
    unreadable = sum((c.unreadable for c in converters.values()), Counter())
    context.log.info(f"{org} {spec.name}: {rows} rows -> {staged.published} ({stats.requests} requests)")
    if report.in_flux_count or report.gone:
        context.log.warning(report.describe())
    if unreadable:
        context.log.warning(
            f"{spec.name}: {sum(unreadable.values())} value(s) could not be read and are kept raw in _extra: "
            + ", ".join(f"{path} {n}" for path, n in unreadable.most_common())
        )
    return dg.MaterializeResult(
        metadata={
            **SyncStats(rows=rows, duration_seconds=time.monotonic() - fetch.started,
                        rows_in_flux=report.in_flux_count).as_metadata(),
            "api_total": report.api_total,
            "suppressed": suppressed,
            "rows_fetched": staged.rows_written,
            **_changed_rows_metadata(staged.changes),
            **listing_metadata(report),
            "unreadable_values": dg.MetadataValue.json(dict(unreadable.most_common())),
            **stats.as_metadata(),
            "read_ahead": fetch.read_ahead,
            "merge_handed_to_background": handed,
            "path": dg.MetadataValue.path(str(staged.published)),
            "profile": dg.MetadataValue.md(profile),
        },
        check_results=check_results,
    )


def build_snapshot_asset(spec: ResourceSpec) -> dg.AssetsDefinition:
    key = snapshot_key(spec.name)
    # Dagster step priority, highest first; the table steps (priority 0) come after every fetch.
    priority = len(FETCH_ORDER) - FETCH_ORDER.index(spec.name) if spec.name in FETCH_ORDER else 0

    @dg.asset(
        key=key,
        op_tags={"dagster/priority": str(priority)},
        partitions_def=ORGS,
        group_name="lake",
        kinds={"parquet"},
        check_specs=checks.snapshot_check_specs(spec, key),
        description=f"Parquet snapshot: {spec.description}",
        metadata={
            "api_path": f"/v1{spec.path}",
            "id_prefix": spec.id_prefix,
            **column_schema(spec.schema),
            **catalog_reference(spec),
        },
    )
    def _snapshot(
        context: dg.AssetExecutionContext,
        api: CommopsApiResource,
        orgs: OrgsResource,
        lake: LakeResource,
        progress: dg.ResourceParam[ProgressReporter],
        warehouse: WarehouseResource,
    ):
        yield from checks.apart(key, snapshot(context, spec, api, orgs, lake, progress, warehouse))

    return _snapshot


SNAPSHOT_ASSETS = [build_snapshot_asset(spec) for spec in CATALOG]
