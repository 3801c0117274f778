"""The reconciliation's warehouse tables, with their comments: the latest result per organization, the
run log, the write-back plan, its approvals, the admins' choice of duplicate masters and the audit.
Every table starts with `org` (the `orgs` partition the row belongs to), part of its key.
`ensure_tables` creates what is missing, adds the columns of a table from an older version (`org`
defaults to 'default' there; old audit rows get an audit_id) and (re)writes the comments."""

from __future__ import annotations

import duckdb

from resources.sql import sql_literal

RESULT_TABLE = "kol_crm_reconciliation"
RUNS_TABLE = "reconciliation_runs"
AUDIT_TABLE = "crm_writeback_audit"
PLAN_TABLE = "crm_writeback_plan"
APPROVALS_TABLE = "crm_writeback_approvals"
MASTERS_TABLE = "crm_duplicate_masters"
EXTRACT_TABLE = "crm_extract_state"
CONTACTS_TABLE = "crm_contacts"
DEFAULT_ORG = "default"
ORG = ("org", "VARCHAR", "Organization the row belongs to (the `orgs` partition; `default` in a single-organization setup)")

STATUSES = (
    "matched",
    "conflict",
    "missing_in_crm",
    "crm_only",
    "duplicate_in_crm",
    "no_email",
    "orphan_in_crm",
    "id_conflict",
    "duplicate_in_kols",
    "probable_match",
)

# (table, description, ((column, type, comment), ...))
TABLES: tuple[tuple[str, str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        RESULT_TABLE,
        "CRM reconciliation of non-archived KOLs against CRM contacts by normalized email: the full result of "
        "the latest run of each organization (its rows replaced per run; key org + crm_id, or org + kol_id on KOL-only rows). Every contact is on exactly one row; every KOL is on exactly one "
        "row with kol_primary = true (a KOL also appears, with kol_primary = false, on the other rows of its "
        "duplicate_in_crm / id_conflict / orphan_in_crm contacts).",
        (
            ORG,
            ("run_id", "VARCHAR", "Run that produced the row (reconciliation_runs.run_id)"),
            ("reconciled_at", "TIMESTAMPTZ", "Start of that run (UTC)"),
            ("status", "VARCHAR", "matched, conflict, missing_in_crm, crm_only, duplicate_in_crm, no_email, "
             "orphan_in_crm, id_conflict, duplicate_in_kols or probable_match (docs/crm-decisions-reconciliation.md)"),
            ("kol_id", "VARCHAR", "KOL of the row: the KOL whose normalized email the contact has, or the KOL alone"),
            ("kol_primary", "BOOLEAN", "True on the one row that counts the KOL (each KOL exactly once)"),
            ("crm_id", "VARCHAR", "CRM contact id (Salesforce Id); NULL on KOL-only rows"),
            ("external_id", "VARCHAR", "KOL id the contact carries in the CRM's external-id field (e.g. KOL_Id__c)"),
            ("email_normalized", "VARCHAR", "Normalized email (trimmed, NFKC, casefolded) the row was matched on"),
            ("kol_email", "VARCHAR", "KOL email as stored in the warehouse"),
            ("crm_email", "VARCHAR", "Contact email as stored in the CRM"),
            ("kol_name", "VARCHAR", "KOL full name"),
            ("crm_name", "VARCHAR", "Contact FirstName + ' ' + LastName"),
            ("institution", "VARCHAR", "KOL institution (the contact's account name on rows without a KOL)"),
            ("differences", "JSON", "List of {field, kol_value, crm_value} (raw values) of the fields write-back writes "
             "that differ after normalization (they make the row a conflict); NULL when none or no KOL"),
            ("differences_not_written", "JSON", "List of {field, kol_value, crm_value} of mapped fields that differ but "
             "write-back never writes (report-only, CRM-owned, or on another object such as the Account): 'differs in "
             "the CRM (not ours to write)'; they never make a row a conflict. NULL when none"),
            ("candidates", "JSON", "missing_in_crm and no_email rows: up to three contacts {crm_id, name, email, "
             "institution, score} scored as probable matches (best first); NULL when none shares a blocking key"),
            ("note", "VARCHAR", "Why the status, in words, where the status alone does not say it"),
            ("match_score", "DOUBLE", "probable_match rows: probability 0..1 that KOL and contact are one person "
             "(docs/crm.md, 'Probable matches')"),
            ("score_band", "VARCHAR", "probable_match rows: the 0.05-wide band of match_score, e.g. 0.90-0.95"),
            ("match_reasons", "JSON", "probable_match rows: per field {field, level, bits}: how each field compared and "
             "how much it added (positive) or removed (negative) evidence, in bits"),
            ("needs_review", "BOOLEAN", "True where write-back will not create a contact for the KOL because a contact "
             "probably is that KOL (probable_match rows, and KOLs whose candidate reaches the threshold)"),
            ("duplicate_set_id", "VARCHAR", "Contacts the probable-match rule says are one person share this id "
             "('dup-' + the smallest contact id of the set); NULL when the contact has no duplicate"),
            ("suggested_master", "VARCHAR", "The contact of the set to keep when merging (its crm_id)"),
            ("master_reason", "VARCHAR", "Why that contact: has the external id, most complete, most recently modified"),
        ),
    ),
    (
        RUNS_TABLE,
        "One row per CRM reconciliation run of an organization (appended; key org + run_id): counts per status, "
        "duration and the report files.",
        (
            ORG,
            ("run_id", "VARCHAR", "Run identifier"),
            ("reconciled_at", "TIMESTAMPTZ", "Start of the run (UTC)"),
            ("source", "VARCHAR", "CRM the contacts came from (e.g. salesforce)"),
            ("kols", "BIGINT", "Non-archived KOLs reconciled"),
            ("contacts", "BIGINT", "CRM contacts reconciled"),
            *((status, "BIGINT", f"Rows with status {status}") for status in STATUSES),
            ("needs_review", "BIGINT", "KOLs write-back will not create because a contact probably is that KOL"),
            ("duplicate_sets", "BIGINT", "Duplicate sets found within the CRM"),
            ("match_threshold", "DOUBLE", "Probable-match threshold of the run"),
            ("duration_seconds", "DOUBLE", "Wall time of the reconciliation (s)"),
            ("report_csv", "VARCHAR", "Path of the run's CSV report (NULL until written)"),
            ("report_html", "VARCHAR", "Path of the run's HTML report (NULL until written)"),
        ),
    ),
    (
        AUDIT_TABLE,
        "Every CRM write-back change planned, applied or undone and every admin decision, one row per field "
        "(appended; key org + audit_id).",
        (
            ORG,
            ("audit_id", "VARCHAR", "Stable identifier of the row (what `commops reconcile undo` takes)"),
            ("user", "VARCHAR", "Who acted: the OS user of the command, or the user signed in to the review page; "
             "NULL for scheduled runs"),
            ("run_id", "VARCHAR", "Reconciliation run the plan came from"),
            ("at", "TIMESTAMPTZ", "Time the row was recorded (UTC)"),
            ("mode", "VARCHAR", "dry_run (planned only), applied (read back: Salesforce holds new_value), failed "
             "(see error: 'rejected by Salesforce: ...' or 'not written: ...'), unverified (sent, but it could not "
             "be read back), recorded (a decision kept in the warehouse or the data directory)"),
            ("action", "VARCHAR", "create (upsert by external id = KOL id), update, confirm (the external id set on "
             "that contact), reject, undo (old_value written back; see undoes), approve / exclude (a planned "
             "change's approval) or choose_master (a duplicate set's master)"),
            ("kol_id", "VARCHAR", "KOL the change comes from"),
            ("crm_id", "VARCHAR", "Contact changed (NULL for creates until the CRM assigns one)"),
            ("field", "VARCHAR", "Canonical contact field written"),
            ("old_value", "VARCHAR", "Value in the CRM before (NULL for creates)"),
            ("new_value", "VARCHAR", "Value written"),
            ("error", "VARCHAR", "Why a row is not applied: 'rejected by Salesforce: <its error>' or 'not written: ...'"),
            ("crm_value_after", "VARCHAR", "The value Salesforce holds for the field, read back after the write"),
            ("plan_key", "VARCHAR", "The planned change the row comes from (crm_writeback_plan.plan_key)"),
            ("undoes", "VARCHAR", "undo rows: audit_id of the change undone"),
            ("score", "DOUBLE", "confirm / reject rows: the probable-match score the pair had when decided"),
            ("erased_at", "TIMESTAMPTZ", "Set when the KOL's data was erased for privacy: the values are gone, the row "
             "stays as the record that something was done; it cannot be undone"),
        ),
    ),
    (
        PLAN_TABLE,
        "The write-back plan of each organization's latest reconciliation, one row per field to write (made "
        "again per run, only the rows that differ written; key org + plan_key). Nothing in it is written without an approval or --apply.",
        (
            ORG,
            ("run_id", "VARCHAR", "Reconciliation run the plan came from"),
            ("plan_key", "VARCHAR", "Identifies the change (md5 of action, KOL, contact, field and new value): an "
             "approval carries over to the next run only while the change is the same"),
            ("action", "VARCHAR", "create or update"),
            ("kol_id", "VARCHAR", "KOL the change comes from"),
            ("crm_id", "VARCHAR", "Contact to update (NULL for creates)"),
            ("field", "VARCHAR", "Canonical contact field to write"),
            ("old_value", "VARCHAR", "Value in the CRM now (NULL for creates)"),
            ("new_value", "VARCHAR", "Value to write"),
            ("kol_name", "VARCHAR", "KOL full name"),
            ("institution", "VARCHAR", "KOL institution"),
        ),
    ),
    (
        APPROVALS_TABLE,
        "CRM admins' approvals of planned changes (key org + plan_key): approve (write it with the next "
        "apply of the approved rows) or exclude (never written while the change stays the same).",
        (
            ORG,
            ("plan_key", "VARCHAR", "crm_writeback_plan.plan_key"),
            ("kol_id", "VARCHAR", "KOL of the change"),
            ("decision", "VARCHAR", "approve or exclude"),
            ("user", "VARCHAR", "Who decided"),
            ("at", "TIMESTAMPTZ", "When (UTC)"),
        ),
    ),
    (
        MASTERS_TABLE,
        "The master a CRM admin chose for a duplicate set, where it is not the suggested one (key org + "
        "duplicate_set_id); the merge CSV follows it. Nothing is merged in Salesforce for you.",
        (
            ORG,
            ("duplicate_set_id", "VARCHAR", "kol_crm_reconciliation.duplicate_set_id"),
            ("master_crm_id", "VARCHAR", "The contact to keep"),
            ("user", "VARCHAR", "Who chose"),
            ("at", "TIMESTAMPTZ", "When (UTC)"),
        ),
    ),
    (
        EXTRACT_TABLE,
        "Where the next contacts' extract of each organization starts (key org + source; replaced per extract): "
        "Salesforce contacts whose SystemModstamp is at or after the watermark, deleted ones included, are merged "
        "into crm_contacts; a full extract when there is none or the last full one is older than a week.",
        (
            ORG,
            ("source", "VARCHAR", "CRM the contacts came from (salesforce)"),
            ("watermark", "TIMESTAMPTZ", "Salesforce's time when the last extract began, to the second: every "
                                        "contact stamped before it has been read (UTC)"),
            ("full_extract_at", "TIMESTAMPTZ", "When the last full extract ran (UTC)"),
            ("extracted_at", "TIMESTAMPTZ", "When the last extract, full or incremental, ran (UTC)"),
            ("rows_read", "BIGINT", "Rows the last extract read (changed and deleted ones on an incremental night)"),
            ("rows_deleted", "BIGINT", "Contacts the last incremental extract found deleted (IsDeleted) and removed"),
        ),
    ),
)


# Strings unique to a row: DuckDB's default (DICT_FSST) analysis dominated writing the 1M-row
# result (~0.5 s CPU per column); ZSTD writes them about 3x faster and smaller.
ZSTD_COLUMNS = {RESULT_TABLE: frozenset({"kol_id", "crm_id", "external_id", "email_normalized", "kol_email", "crm_email"})}


def ensure_tables(conn: duckdb.DuckDBPyConnection, replace: tuple[str, ...] = ()) -> None:
    """Create the tables if missing (those in `replace` anew, empty) and set their table and
    column comments. A table already as described is left alone: one catalog query, not a statement per column."""
    here = "database_name = current_database() AND schema_name = current_schema()"
    described = dict(conn.execute(f"SELECT table_name, comment FROM duckdb_tables() WHERE {here}").fetchall())
    commented = {(table, column): comment for table, column, comment in conn.execute(
        f"SELECT table_name, column_name, comment FROM duckdb_columns() WHERE {here}").fetchall()}
    for table, description, columns in TABLES:
        if table not in replace and described.get(table) == description and all(
                (table, name) in commented and commented[table, name] == comment for name, _, comment in columns):
            continue
        zstd = ZSTD_COLUMNS.get(table, frozenset())
        body = ", ".join(f'"{name}" {type_}' + (" USING COMPRESSION zstd" if name in zstd else "")
                         for name, type_, _ in columns)
        create = "CREATE OR REPLACE TABLE" if table in replace else "CREATE TABLE IF NOT EXISTS"
        conn.execute(f"{create} {table} ({body})")
        present = {row[0] for row in conn.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = current_schema()", [table]).fetchall()}
        for name, type_, _ in columns:  # a table from an older version gets the columns added since
            if name not in present:
                default = f" DEFAULT {sql_literal(DEFAULT_ORG)}" if name == "org" else ""
                conn.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" {type_}{default}')
                if name == "audit_id":
                    conn.execute(f"UPDATE {table} SET audit_id = uuid()::VARCHAR WHERE audit_id IS NULL")
        conn.execute(f"COMMENT ON TABLE {table} IS {sql_literal(description)}")
        for name, _, comment in columns:
            conn.execute(f'COMMENT ON COLUMN {table}."{name}" IS {sql_literal(comment)}')


def column_names(table: str) -> tuple[str, ...]:
    return tuple(name for name, _, _ in columns_of(table))


def columns_of(table: str) -> tuple[tuple[str, str, str], ...]:
    """(name, type, comment) of each column of one of these tables."""
    (columns,) = [columns for name, _, columns in TABLES if name == table]
    return columns


BAND_WIDTH = 0.05


def score_band_sql(score: str) -> str:
    """SQL of the 0.05-wide band a score 0..1 falls in, as text ('0.90-0.95'; 1.0 is in '0.95-1.00')."""
    low = f"least(floor(({score}) / {BAND_WIDTH}), {int(1 / BAND_WIDTH) - 1}) * {BAND_WIDTH}"
    return f"CASE WHEN ({score}) IS NOT NULL THEN printf('%.2f-%.2f', {low}, {low} + {BAND_WIDTH}) END"


def score_bands() -> list[str]:
    """Every band, lowest first."""
    steps = int(1 / BAND_WIDTH)
    return [f"{i * BAND_WIDTH:.2f}-{(i + 1) * BAND_WIDTH:.2f}" for i in range(steps)]
