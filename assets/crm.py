"""The CRM group: contacts extracted from the CRM, their reconciliation against the KOL table, and
the opt-in write-back.

crm/contacts streams the CRM's contacts (Salesforce or a report export, resources/crm) into a
Parquet snapshot of the lake and replaces the DuckDB table crm_contacts. crm/kol_reconciliation
reconciles them with the warehouse's `kols` (crm/reconcile.py), writes the CSV and HTML
reports and appends the run's counts to reconciliation_runs. crm/writeback plans the fixes the
field policies allow and, only when its config says apply, sends them to the CRM; every planned
or applied change is in crm_writeback_audit. The `analytics` asset publishes the tables after them.
"""

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import dagster as dg

from crm import report, review, tables, writeback
from crm.probable import DEFAULT_THRESHOLD
from crm.reconcile import DEFAULT_RULES, reconcile
from crm.tables import AUDIT_TABLE, RESULT_TABLE
from assets.metadata import column_schema
from assets.snapshot_date import snapshot_date as run_snapshot_date
from resources.crm.errors import CrmError
from resources.crm.mapping import CONTACT_SCHEMA
from resources.lake import LakeResource
from resources.sql import read_parquet
from resources.warehouse import WarehouseResource

CONTACTS_KEY = dg.AssetKey(["crm", "contacts"])
RECONCILIATION_KEY = dg.AssetKey(["crm", "kol_reconciliation"])
WRITEBACK_KEY = dg.AssetKey(["crm", "writeback"])
WRITEBACK_OP = "crm__writeback"
CONTACTS_TABLE = "crm_contacts"
CONTACTS_LAKE = "crm_contacts"
KOLS_KEY = dg.AssetKey(["warehouse", "kols"])
REPORTS_DIR = Path("reports") / "reconciliation"
PROGRESS_EVERY = 50_000


class CrmSource(Protocol):
    """What the CRM assets need of a CRM resource (SalesforceResource or CrmCsvResource)."""

    @property
    def source_name(self) -> str: ...

    @property
    def writable(self) -> bool: ...

    @property
    def match_threshold(self) -> float: ...

    def iter_contacts(self, batch_size: int = ...) -> Any: ...

    def upsert_contacts(self, rows: Any) -> list: ...

    def update_contacts(self, rows: Any) -> list: ...


def _table_schema(table: str) -> dict:
    """`dagster/column_schema` of one of the reconciliation's tables, from its column comments."""
    return {"dagster/column_schema": dg.TableSchema(
        columns=[dg.TableColumn(name=name, type=type_, description=text) for name, type_, text in tables.columns_of(table)])}


@dg.asset(
    key=CONTACTS_KEY,
    group_name="crm",
    kinds={"salesforce", "parquet", "duckdb"},
    pool="warehouse",
    description=f"CRM contacts (Salesforce, or the report export of COMMOPS_CRM_CSV) in canonical columns: a lake "
    f"snapshot and the DuckDB table {CONTACTS_TABLE}, replaced per run.",
    metadata={"table": CONTACTS_TABLE, **column_schema(CONTACT_SCHEMA)},
)
def crm_contacts(
    context: dg.AssetExecutionContext, crm: dg.ResourceParam[CrmSource], lake: LakeResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    started = time.monotonic()
    date = run_snapshot_date(context)
    rows = 0
    with lake.snapshot(None, CONTACTS_LAKE, date, CONTACT_SCHEMA, key="Id") as staged:  # the deployment's own
        for batch in crm.iter_contacts():
            staged.write(batch)
            if (rows + batch.num_rows) // PROGRESS_EVERY > rows // PROGRESS_EVERY:
                context.log.info(f"crm/contacts: {rows + batch.num_rows:,} contacts read from {crm.source_name}")
            rows += batch.num_rows
        staged.finish()
    with lake.local_snapshot(None, CONTACTS_LAKE, date) as snapshot, warehouse.writer(context.log) as session:
        session.replace_table(
            CONTACTS_TABLE,
            f"(SELECT *, now() AS _extracted_at FROM {read_parquet(snapshot)})",
            CONTACT_SCHEMA,
            f"CRM contacts as extracted by the latest reconciliation run from {crm.source_name}",
            {"_extracted_at": "Time the contact was extracted from the CRM (UTC)"},
        )
    context.log.info(f"crm/contacts: {rows:,} contacts from {crm.source_name}")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "source": crm.source_name,
            "snapshot": dg.MetadataValue.path(str(staged.published)),
            "duration_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3)),
        }
    )


@dg.asset(
    key=RECONCILIATION_KEY,
    deps=[CONTACTS_KEY, KOLS_KEY],
    group_name="crm",
    kinds={"duckdb"},
    pool="warehouse",
    description="Every non-archived KOL and every CRM contact with one status (matched, conflict, missing_in_crm, "
    "crm_only, duplicate_in_crm, no_email, orphan_in_crm, id_conflict, ...): table kol_crm_reconciliation, run counts "
    "in reconciliation_runs, CSV and HTML reports under $COMMOPS_DATA_DIR/reports/reconciliation/.",
    metadata={"table": RESULT_TABLE, **_table_schema(RESULT_TABLE)},
)
def kol_reconciliation(
    context: dg.AssetExecutionContext, crm: dg.ResourceParam[CrmSource], warehouse: WarehouseResource
) -> dg.MaterializeResult:
    reports_dir = Path(warehouse.data_dir) / REPORTS_DIR
    with warehouse.writer(context.log, threads=warehouse.reconcile_threads,
                          memory_limit=warehouse.reconcile_memory_limit) as session:
        if not session.exists("kols"):
            raise dg.Failure("the warehouse has no kols table yet: run `commops sync` (the nightly sync) first")
        result = reconcile(session.conn, "kols", CONTACTS_TABLE, DEFAULT_RULES, run_id=context.run.run_id,
                           source=crm.source_name, match_threshold=getattr(crm, "match_threshold", DEFAULT_THRESHOLD),
                           rejected=review.load_rejections(warehouse.data_dir))
        csv_path, html_path = report.write_reports(session.conn, reports_dir, writable=crm.writable,
                                                   record_base_url=crm.record_base_url if crm.writable else None)
        preview = report.markdown_summary(session.conn)
    context.log.info(f"crm/kol_reconciliation: {result.counts}; report {html_path}")
    result = replace(result, report_html=html_path, report_csv=csv_path)
    return dg.MaterializeResult(metadata={**result.as_metadata(), "summary": dg.MetadataValue.md(preview)})


class WritebackConfig(dg.Config):
    apply: bool = False  # the default is a dry run: the plan is recorded, nothing is sent to the CRM


@dg.asset(
    key=WRITEBACK_KEY,
    deps=[RECONCILIATION_KEY],
    group_name="crm",
    kinds={"salesforce", "duckdb"},
    pool="warehouse",
    description="The fixes the field policies allow (create missing contacts; update fields where the KOL record wins), "
    "by upsert on the external-id field; a dry run unless configured with apply: true. Never deletes. Every change "
    "is recorded in crm_writeback_audit.",
    metadata={"table": AUDIT_TABLE, **_table_schema(AUDIT_TABLE)},
)
def crm_writeback(
    context: dg.AssetExecutionContext, config: WritebackConfig, crm: dg.ResourceParam[CrmSource],
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    if config.apply and not crm.writable:
        raise CrmError(f"write-back needs Salesforce, and the CRM is {crm.source_name} (read-only): "
                       "unset COMMOPS_CRM_CSV and set the SALESFORCE_* login to apply")
    with warehouse.writer(context.log) as session:
        plan = writeback.plan_writeback(session.conn, DEFAULT_RULES)
        review_count = len(writeback.needs_review(session.conn))
    # The CRM calls run outside the writer lock: a slow Salesforce must not hold up a nightly sync.
    if config.apply:
        audit = writeback.apply_plan(plan, crm, run_id=context.run.run_id)
    else:
        audit = writeback.dry_run(plan, run_id=context.run.run_id)
    with warehouse.writer(context.log) as session:
        writeback.record_audit(session.conn, audit)
    outcome = writeback.WritebackOutcome.of(plan, audit, applied=config.apply, writable=crm.writable,
                                            needs_review=review_count)
    context.log.info(f"crm/writeback ({'applied' if config.apply else 'dry run'}): {outcome}")
    return dg.MaterializeResult(metadata=outcome.as_metadata())



CRM_ASSETS = [crm_contacts, kol_reconciliation, crm_writeback]
