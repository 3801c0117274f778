"""The CRM group: contacts extracted from the CRM, their reconciliation against the KOL table, and
the opt-in write-back.

Every asset is partitioned by organization (`orgs`, as the nightly sync): one CRM, shared by the
deployment (SALESFORCE_* / COMMOPS_CRM_CSV), is reconciled against each organization's KOLs in that
organization's run, and every table row carries `org`. crm/contacts streams the CRM's contacts
(Salesforce or a report export, resources/crm) into a Parquet snapshot of the organization's lake and
replaces its rows of the DuckDB table crm_contacts. crm/kol_reconciliation reconciles them with the
organization's `kols` (crm/reconcile.py), stores the write-back plan, writes the CSV and HTML reports
and appends the run's counts to reconciliation_runs. crm/writeback records the plan (a dry run) or,
only when its config says apply, sends it to the CRM (less what an admin excluded) and reads it back;
every planned or applied change is in crm_writeback_audit. The `analytics` asset publishes the tables.
"""

import time
from dataclasses import replace
from typing import Any, Protocol

import dagster as dg

from crm import approvals, contact_changes, kept_features, report, review, tables, writeback
from crm.probable import DEFAULT_THRESHOLD
from crm.reconcile import DEFAULT_RULES, org_contacts, org_kols, reconcile
from crm.tables import AUDIT_TABLE, CONTACTS_TABLE, DEFAULT_ORG, RESULT_TABLE
from assets.metadata import column_schema
from assets.partitions import ORGS, partition_org
from assets.snapshot_date import snapshot_date as run_snapshot_date
from resources.crm.errors import CrmError
from resources.crm.settings import CrmSettings
from resources.crm.mapping import CHANGES_SCHEMA, CONTACT_SCHEMA, CONTACT_UNIQUE
from resources.lake import LakeResource
from resources import sql
from resources.sql import read_parquet, sql_literal, transaction
from resources.warehouse import WarehouseResource

CONTACTS_KEY = dg.AssetKey(["crm", "contacts"])
RECONCILIATION_KEY = dg.AssetKey(["crm", "kol_reconciliation"])
WRITEBACK_KEY = dg.AssetKey(["crm", "writeback"])
WRITEBACK_OP = "crm__writeback"
CONTACTS_LAKE = "crm_contacts"
KOLS_KEY = dg.AssetKey(["warehouse", "kols"])
REPORTS_DIR = report.REPORTS_DIR
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

    def read_contacts(self, crm_ids: Any) -> Any: ...



def _table_schema(table: str) -> dict:
    """`dagster/column_schema` of one of the reconciliation's tables, from its column comments."""
    return {"dagster/column_schema": dg.TableSchema(
        columns=[dg.TableColumn(name=name, type=type_, description=text) for name, type_, text in tables.columns_of(table)])}


@dg.asset(
    key=CONTACTS_KEY,
    partitions_def=ORGS,
    group_name="crm",
    kinds={"salesforce", "parquet", "duckdb"},
    pool="warehouse",
    description=f"CRM contacts (Salesforce, or the report export of COMMOPS_CRM_CSV) in canonical columns: a lake "
    f"snapshot and the organization's rows of the DuckDB table {CONTACTS_TABLE}, replaced per run.",
    metadata={"table": CONTACTS_TABLE, **column_schema(CONTACT_SCHEMA)},
)
def crm_contacts(
    context: dg.AssetExecutionContext, crm: dg.ResourceParam[CrmSource], lake: LakeResource, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    started = time.monotonic()
    org = partition_org(context)
    date = run_snapshot_date(context)
    since = None
    if hasattr(crm, "contact_changes"):  # Salesforce: SystemModstamp and IsDeleted (crm/contact_changes.py)
        with warehouse.writer(context.log) as session:
            since = contact_changes.since(session.conn, org, crm.source_name)
    if since is not None:
        rows, read, deleted, published = _merge_changes(context, crm, lake, warehouse, org, date, since)
    else:
        rows, published = _extract_all(context, crm, lake, warehouse, org, date)
        read, deleted = rows, 0
    mode = "full" if since is None else "changes"
    context.log.info(f"crm/contacts: {rows:,} contacts from {crm.source_name} ({mode} extract: {read:,} read, "
                     f"{deleted:,} deleted)")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": rows,
            "source": crm.source_name,
            "snapshot": dg.MetadataValue.path(str(published)),
            "extract": mode,
            "rows_read": read,
            "contacts_deleted": deleted,
            "duration_seconds": dg.MetadataValue.float(round(time.monotonic() - started, 3)),
        }
    )


def _extract_all(context: dg.AssetExecutionContext, crm: CrmSource, lake: LakeResource, warehouse: WarehouseResource,
                 org: str, date: str) -> tuple[int, Any]:
    """Every contact into the lake's snapshot, then the organization's rows of crm_contacts replaced and the
    extract's state recorded (Salesforce: its watermark; any other source: none, so the next Salesforce extract
    is full). Returns (rows, the published snapshot)."""
    changes = crm.contact_changes(None) if hasattr(crm, "contact_changes") else None
    rows = 0
    with lake.snapshot(org, CONTACTS_LAKE, date, CONTACT_SCHEMA, key="Id", unique=CONTACT_UNIQUE) as staged:
        for batch in (changes if changes is not None else crm.iter_contacts()):
            if changes is not None:
                batch = batch.select(CONTACT_SCHEMA.names)
            staged.write(batch)
            _progress(context, crm, rows, batch.num_rows)
            rows += batch.num_rows
        staged.finish()
    with lake.local_snapshot(org, CONTACTS_LAKE, date) as snapshot, warehouse.writer(context.log) as session:
        replace_contacts(session.conn, org, read_parquet(snapshot), crm.source_name)
        if changes is not None:
            contact_changes.record(session.conn, org, crm.source_name, changes.watermark, full=True, rows=rows)
        else:
            contact_changes.forget(session.conn, org)
    return rows, staged.published


def _merge_changes(context: dg.AssetExecutionContext, crm: CrmSource, lake: LakeResource, warehouse: WarehouseResource,
                   org: str, date: str, since: Any) -> tuple[int, int, int, Any]:
    """The contacts changed or deleted since `since`, staged in a scratch file (the CRM is read outside the
    writer lock), merged into crm_contacts with the extract's new watermark; the lake's snapshot of the date is the
    merged table. Returns (its rows, rows read, contacts deleted, the published snapshot)."""
    rows, changes = 0, crm.contact_changes(since)
    with lake.snapshot(org, CONTACTS_LAKE + "_changes", date, CHANGES_SCHEMA, key="Id", publish=False,
                       unique=CONTACT_UNIQUE) as staged:
        for batch in changes:
            staged.write(batch)
            _progress(context, crm, rows, batch.num_rows)
            rows += batch.num_rows
        staged.finish()
        with warehouse.writer(context.log) as session:
            _, deleted = contact_changes.merge(session.conn, org, read_parquet(staged.path))
            contact_changes.record(session.conn, org, crm.source_name, changes.watermark, full=False, rows=rows,
                                   deleted=deleted)
            with lake.snapshot(org, CONTACTS_LAKE, date, CONTACT_SCHEMA, key="Id", unique=CONTACT_UNIQUE) as snapshot:
                columns = ", ".join(f'"{name}"' for name in CONTACT_SCHEMA.names)
                with sql.cursor(session.conn) as cursor:
                    reader = cursor.sql(f"SELECT {columns} FROM {CONTACTS_TABLE} WHERE org = {sql_literal(org)}"
                                        ).to_arrow_reader(50_000)
                    for batch in reader:
                        snapshot.write(batch.cast(CONTACT_SCHEMA))
                total = snapshot.finish()
    return total, rows, deleted, snapshot.published


def _progress(context: dg.AssetExecutionContext, crm: CrmSource, rows: int, more: int) -> None:
    if (rows + more) // PROGRESS_EVERY > rows // PROGRESS_EVERY:
        context.log.info(f"crm/contacts: {rows + more:,} contacts read from {crm.source_name}")


def replace_contacts(conn: Any, org: str, source: str, source_name: str) -> None:
    """Replace organization `org`'s rows of crm_contacts with `source` (canonical contact columns), in one
    transaction; a table from before organizations gets `org` ('default' for its rows)."""
    columns = ", ".join(f'"{name}"' for name in CONTACT_SCHEMA.names)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {CONTACTS_TABLE} AS SELECT {sql_literal(org)} AS org, {columns}, "
                 f"now() AS _extracted_at FROM {source} LIMIT 0")
    present = {row[0] for row in conn.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = current_schema()",
        [CONTACTS_TABLE]).fetchall()}
    if "org" not in present:
        conn.execute(f"ALTER TABLE {CONTACTS_TABLE} ADD COLUMN org VARCHAR DEFAULT {sql_literal(DEFAULT_ORG)}")
    with transaction(conn):
        conn.execute(f"DELETE FROM {CONTACTS_TABLE} WHERE org = ?", [org])
        conn.execute(f"INSERT INTO {CONTACTS_TABLE} BY NAME SELECT {sql_literal(org)} AS org, {columns}, "
                     f"now() AS _extracted_at FROM {source}")
        conn.execute(f"COMMENT ON TABLE {CONTACTS_TABLE} IS "
                     f"{sql_literal(f'CRM contacts as extracted by the latest reconciliation run of each organization from {source_name} (key org + crm_id)')}")
        for field in CONTACT_SCHEMA:
            conn.execute(f'COMMENT ON COLUMN {CONTACTS_TABLE}."{field.name}" IS '
                         f"{sql_literal(field.metadata[b'description'].decode())}")
        conn.execute(f"COMMENT ON COLUMN {CONTACTS_TABLE}.org IS {sql_literal(tables.ORG[2])}")
        conn.execute(f"COMMENT ON COLUMN {CONTACTS_TABLE}._extracted_at IS 'Time the contact was extracted from the CRM (UTC)'")


@dg.asset(
    key=RECONCILIATION_KEY,
    partitions_def=ORGS,
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
    org = partition_org(context)
    with warehouse.writer(context.log, threads=warehouse.reconcile_threads,
                          memory_limit=warehouse.reconcile_memory_limit) as session:
        if not session.exists("kols"):
            raise dg.Failure("the warehouse has no kols table yet: run `commops sync` (the nightly sync) first")
        with kept_features.attached(session.conn, warehouse.data_dir, org) as kept:
            result = reconcile(session.conn, org_kols(org), org_contacts(org), DEFAULT_RULES, run_id=context.run.run_id,
                               source=crm.source_name, match_threshold=getattr(crm, "match_threshold", DEFAULT_THRESHOLD),
                               rejected=review.load_rejections(warehouse.data_dir), org=org, kept=kept)
            csv_path, html_path = report.write_reports(
                session.conn, report.reports_dir(warehouse.data_dir, org), org=org, writable=crm.writable,
                record_base_url=crm.record_base_url if crm.writable else None,
                review_url=CrmSettings().commops_review_url, kept=kept,
                before_page=lambda: writeback.store_plan(session.conn, DEFAULT_RULES, org_kols(org), org,
                                                         context.run.run_id))
        preview = report.markdown_summary(session.conn, org)
    context.log.info(f"crm/kol_reconciliation: {result.counts}; report {html_path}")
    result = replace(result, report_html=html_path, report_csv=csv_path)
    return dg.MaterializeResult(metadata={**result.as_metadata(), "summary": dg.MetadataValue.md(preview)})


class WritebackConfig(dg.Config):
    apply: bool = False  # the default is a dry run: the plan is recorded, nothing is sent to the CRM
    user: str | None = None  # who asked (`commops reconcile` passes the OS user); None for scheduled runs


@dg.asset(
    key=WRITEBACK_KEY,
    partitions_def=ORGS,
    deps=[RECONCILIATION_KEY],
    group_name="crm",
    kinds={"salesforce", "duckdb"},
    pool="warehouse",
    description="The fixes the field policies allow (create missing contacts; update fields where the KOL record wins), "
    "by upsert on the external-id field; a dry run unless configured with apply: true (then less what an admin "
    "excluded, read back after writing). Never deletes. Every change is recorded in crm_writeback_audit.",
    metadata={"table": AUDIT_TABLE, **_table_schema(AUDIT_TABLE)},
)
def crm_writeback(
    context: dg.AssetExecutionContext, config: WritebackConfig, crm: dg.ResourceParam[CrmSource],
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    if config.apply and not crm.writable:
        raise CrmError(f"write-back needs Salesforce, and the CRM is {crm.source_name} (read-only): "
                       "unset COMMOPS_CRM_CSV and set the SALESFORCE_* login to apply")
    org = partition_org(context)
    if not config.apply:
        with warehouse.writer(context.log) as session:
            outcome = writeback.record_dry_run(session.conn, org, context.run.run_id, config.user, crm.writable)
        context.log.info(f"crm/writeback (dry run): {outcome}")
        return dg.MaterializeResult(metadata=outcome.as_metadata())
    with warehouse.writer(context.log) as session:
        plan = approvals.plan_to_apply(session.conn, org, approved_only=False)
        review_count = len(writeback.needs_review(session.conn, org))
    # The CRM calls run outside the writer lock: a slow Salesforce must not hold up a nightly sync.
    audit = writeback.apply_plan(plan, crm, run_id=context.run.run_id, org=org, user=config.user)
    with warehouse.writer(context.log) as session:
        writeback.record_audit(session.conn, audit)
    outcome = writeback.WritebackOutcome.of(plan, audit, applied=True, writable=crm.writable, needs_review=review_count)
    context.log.info(f"crm/writeback (applied): {outcome}")
    return dg.MaterializeResult(metadata=outcome.as_metadata())



CRM_ASSETS = [crm_contacts, kol_reconciliation, crm_writeback]
