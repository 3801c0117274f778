"""The reconciliation's warehouse tables, with their comments: the latest result, the run log and
the write-back audit. `ensure_tables` creates what is missing and (re)writes the comments."""

from __future__ import annotations

import duckdb

from resources.sql import sql_literal

RESULT_TABLE = "kol_crm_reconciliation"
RUNS_TABLE = "reconciliation_runs"
AUDIT_TABLE = "crm_writeback_audit"

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
        "the latest run (replaced per run). Every contact is on exactly one row; every KOL is on exactly one "
        "row with kol_primary = true (a KOL also appears, with kol_primary = false, on the other rows of its "
        "duplicate_in_crm / id_conflict / orphan_in_crm contacts).",
        (
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
            ("differences", "JSON", "List of {field, kol_value, crm_value} (raw values) of mapped fields that differ "
             "after normalization; NULL when none or no KOL"),
            ("candidates", "JSON", "missing_in_crm and no_email rows: up to three contacts {crm_id, name, email, "
             "institution, score} scored as probable matches (best first); NULL when none shares a blocking key"),
            ("note", "VARCHAR", "Why the status, in words, where the status alone does not say it"),
            ("match_score", "DOUBLE", "probable_match rows: probability 0..1 that KOL and contact are one person "
             "(docs/crm.md, 'Probable matches')"),
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
        "One row per CRM reconciliation run (appended): counts per status, duration and the report files.",
        (
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
        "Every CRM write-back change planned or applied, one row per field (appended).",
        (
            ("run_id", "VARCHAR", "Reconciliation run the plan came from"),
            ("at", "TIMESTAMPTZ", "Time the row was recorded (UTC)"),
            ("mode", "VARCHAR", "dry_run (planned only), applied (CRM accepted), failed (CRM refused; see error) or "
             "recorded (a rejection, kept in the data directory)"),
            ("action", "VARCHAR", "create (upsert by external id = KOL id), update, confirm (an admin's "
             "`commops reconcile confirm`: the external id set on that contact) or reject (`commops reconcile reject`)"),
            ("kol_id", "VARCHAR", "KOL the change comes from"),
            ("crm_id", "VARCHAR", "Contact changed (NULL for creates until the CRM assigns one)"),
            ("field", "VARCHAR", "Canonical contact field written"),
            ("old_value", "VARCHAR", "Value in the CRM before (NULL for creates)"),
            ("new_value", "VARCHAR", "Value written"),
            ("error", "VARCHAR", "The CRM's error for failed rows"),
        ),
    ),
)


# Strings unique to a row: DuckDB's default (DICT_FSST) analysis dominated writing the 1M-row
# result (~0.5 s CPU per column); ZSTD writes them about 3x faster and smaller.
ZSTD_COLUMNS = {RESULT_TABLE: frozenset({"kol_id", "crm_id", "external_id", "email_normalized", "kol_email", "crm_email"})}


def ensure_tables(conn: duckdb.DuckDBPyConnection, replace: tuple[str, ...] = ()) -> None:
    """Create the three tables if missing (those in `replace` anew, empty) and set their table and
    column comments."""
    for table, description, columns in TABLES:
        zstd = ZSTD_COLUMNS.get(table, frozenset())
        body = ", ".join(f'"{name}" {type_}' + (" USING COMPRESSION zstd" if name in zstd else "")
                         for name, type_, _ in columns)
        create = "CREATE OR REPLACE TABLE" if table in replace else "CREATE TABLE IF NOT EXISTS"
        conn.execute(f"{create} {table} ({body})")
        present = {row[0] for row in conn.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = current_schema()", [table]).fetchall()}
        for name, type_, _ in columns:  # a table from an older version gets the columns added since
            if name not in present:
                conn.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" {type_}')
        conn.execute(f"COMMENT ON TABLE {table} IS {sql_literal(description)}")
        for name, _, comment in columns:
            conn.execute(f'COMMENT ON COLUMN {table}."{name}" IS {sql_literal(comment)}')


def column_names(table: str) -> tuple[str, ...]:
    return tuple(name for name, _, _ in columns_of(table))


def columns_of(table: str) -> tuple[tuple[str, str, str], ...]:
    """(name, type, comment) of each column of one of these tables."""
    (columns,) = [columns for name, _, columns in TABLES if name == table]
    return columns
