"""`webhooks/applied`: the inbox marks applied exactly the events whose row in the published
analytics.duckdb names this run with status `applied`, so an event counts as applied only once its
changes are committed and published; any failure before leaves it pending."""


import dagster as dg

from assets.analytics import ANALYTICS_KEY
from sync.catalog import WEBHOOK_EVENTS
from assets.partitions import ORGS
from webhooks.reshape import APPLIED
from commops_spec.timestamps import format_timestamp
from resources.webhooks import InboxResource
from resources.warehouse import WarehouseResource

APPLIED_KEY = dg.AssetKey(["webhooks", "applied"])


def applied_in_run(warehouse: WarehouseResource, run_id: str) -> tuple[list[str], str | None]:
    """Ids (and their applied_at) of the events applied by `run_id`, as published in analytics.duckdb."""
    rows = warehouse.read_published(
        WEBHOOK_EVENTS.table,
        f"SELECT id, applied_at FROM {WEBHOOK_EVENTS.table} WHERE run_id = ? AND status = ?",
        [run_id, APPLIED],
    )
    return [row[0] for row in rows], (format_timestamp(rows[0][1]) if rows else None)


@dg.asset(
    key=APPLIED_KEY,
    deps=[ANALYTICS_KEY],
    partitions_def=ORGS,
    group_name="webhooks",
    kinds={"sqlite", "postgres"},
    description=(
        "Marks applied in the inbox exactly the events this run committed and published to analytics.duckdb; "
        "a run that failed before leaves its events pending."
    ),
)
def applied(
    context: dg.AssetExecutionContext, inbox: InboxResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    ids, applied_at = applied_in_run(warehouse, context.run.run_id)
    with inbox.open() as box:
        marked = box.mark_applied(ids, applied_at)
        counts = box.counts()
    context.log.info(
        f"inbox: {marked} event(s) marked applied; {counts['pending']} pending, {counts['quarantined']} quarantined"
    )
    return dg.MaterializeResult(
        metadata={
            "events_marked_applied": marked,
            "inbox_pending": counts["pending"],
            "inbox_failing": counts["failing"],
            "inbox_quarantined": counts["quarantined"],
            "inbox": inbox.where,
        }
    )
