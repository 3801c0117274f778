"""The write-back plan (what the CRM should be told) from a reconciliation result, its audit, and
its application through the CRM resource's duck-typed interface.

- missing_in_crm KOL: a create, upserted by external id = KOL id, with every mapped field write-back
  writes (the name split into first_name / last_name at the last space) and the email; not for a KOL
  that needs review (a contact probably is that KOL: `needs_review`), which would create a duplicate;
- conflict pair: an update of exactly the differing fields write-back writes (policy "kol", a field of
  the Contact itself: `FieldRule.written`), plus the external id when the contact has none;
- nothing else is written (report-only and CRM-owned fields, fields on another object such as the
  Account's name, duplicates, id conflicts and orphans need a person) and nothing is ever deleted.

The plan is long (one row per field, built in SQL) so it audits field by field; `apply_plan` groups
it per record for the CRM calls, then reads every record back: the audit says what Salesforce holds.
"""

from __future__ import annotations

import getpass
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from crm.normalize import normalize_email
from crm.reconcile import FULL_NAME, FieldRule
from crm.tables import AUDIT_TABLE, DEFAULT_ORG, PLAN_TABLE, RESULT_TABLE, column_names, ensure_tables
from resources.crm.base import WriteResult
from resources.crm.mapping import NOT_WRITTEN
from resources.metadata_record import MetadataRecord
from resources.sql import sql_literal, transaction

PLAN = pa.schema(
    [
        ("plan_key", pa.string()),
        ("action", pa.string()),
        ("kol_id", pa.string()),
        ("crm_id", pa.string()),
        ("field", pa.string()),
        ("old_value", pa.string()),
        ("new_value", pa.string()),
        ("kol_name", pa.string()),
        ("institution", pa.string()),
    ]
)
_DIFF_TYPE = """'[{"field":"VARCHAR","kol_value":"VARCHAR","crm_value":"VARCHAR"}]'"""


@dataclass(frozen=True)
class WritebackOutcome(MetadataRecord):
    """What a write-back did, or in a dry run would do: its asset's materialization metadata."""

    applied: bool  # False: a dry run
    writable: bool  # False: the CRM is a read-only export
    creates: int  # contacts to create
    updates: int  # contacts to update
    fields: int  # field values in all (the plan's rows)
    failed: int  # audit rows that failed (or could not be read back)
    needs_review: int  # KOLs a contact probably is (none is created for them)

    @classmethod
    def of(cls, plan: pa.Table, audit: pa.Table, *, applied: bool, writable: bool, needs_review: int) -> WritebackOutcome:
        records = set(zip(plan["action"].to_pylist(), plan["kol_id"].to_pylist(), strict=True))
        return cls(
            applied=applied,
            writable=writable,
            creates=sum(1 for action, _ in records if action == "create"),
            updates=sum(1 for action, _ in records if action == "update"),
            fields=plan.num_rows,
            failed=sum(1 for mode in audit["mode"].to_pylist() if mode in ("failed", "unverified")),
            needs_review=needs_review,
        )


class CrmWriter(Protocol):
    """What apply_plan needs of the CRM resource: per-record results in input order, and a read by Id."""

    def upsert_contacts(self, rows: list[dict[str, Any]]) -> Sequence[WriteResult]: ...

    def update_contacts(self, rows: list[dict[str, Any]]) -> Sequence[WriteResult]: ...

    def read_contacts(self, crm_ids: Sequence[str]) -> pa.Table: ...


def os_user() -> str:
    """The actor of a command: the OS user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container)
        return "unknown"


def plan_key_sql(action: str, kol_id: str, crm_id: str, field: str, new_value: str) -> str:
    return f"md5(concat_ws('|', {action}, {kol_id}, coalesce({crm_id}, ''), {field}, coalesce({new_value}, '')))"


def plan_writeback(conn: duckdb.DuckDBPyConnection, rules: Iterable[FieldRule], kols_relation: str = "kols",
                   org: str = DEFAULT_ORG) -> pa.Table:
    """The plan (PLAN schema) for organization `org`'s latest result in kol_crm_reconciliation, in SQL.
    kols_relation: that organization's KOLs (reconcile.org_kols)."""
    return conn.sql(f"SELECT * FROM ({_plan_sql(rules, kols_relation, org)}) ORDER BY action DESC, kol_id, crm_id, field"
                    ).to_arrow_table().cast(PLAN)


def store_plan(conn: duckdb.DuckDBPyConnection, rules: Iterable[FieldRule], kols_relation: str, org: str,
               run_id: str) -> int:
    """Make organization `org`'s rows of crm_writeback_plan the plan of its latest result (plan_writeback's rows),
    from run `run_id`, writing only the rows that differ from those stored: a night changes few of a plan's rows
    (some 130k at 1M KOLs). Returns the plan's row count."""
    ensure_tables(conn)
    stored = f"(SELECT rowid AS row, * FROM {PLAN_TABLE} WHERE org = {sql_literal(org)}) o"
    same = " AND ".join(f"o.{name} IS NOT DISTINCT FROM n.{name}" for name in PLAN.names)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE _wb_plan AS {_plan_sql(rules, kols_relation, org)}")
    try:
        with transaction(conn):
            conn.execute(f"DELETE FROM {PLAN_TABLE} WHERE rowid IN (SELECT o.row FROM {stored} ANTI JOIN _wb_plan n "
                         f"ON o.plan_key = n.plan_key AND {same})")
            conn.execute(f"INSERT INTO {PLAN_TABLE} BY NAME SELECT ? AS org, ? AS run_id, n.* FROM _wb_plan n "
                         f"ANTI JOIN {stored} ON o.plan_key = n.plan_key AND {same}", [org, run_id])
            conn.execute(f"UPDATE {PLAN_TABLE} SET run_id = ? WHERE org = ? AND run_id IS DISTINCT FROM ?",
                         [run_id, org, run_id])
        return conn.execute("SELECT count(*) FROM _wb_plan").fetchone()[0]
    finally:
        conn.execute("DROP TABLE IF EXISTS _wb_plan")


def _plan_sql(rules: Iterable[FieldRule], kols_relation: str, org: str) -> str:
    """The plan's rows (PLAN's columns, in no order): an update per differing written field of each conflict pair
    (and of its external id when the contact has none), a create per written field of each KOL to create."""
    rules = list(rules)
    this_org = f"org = {sql_literal(org)}"
    labels = " UNION ALL ".join(f"SELECT {sql_literal(rule.field)} AS label, {sql_literal(rule.crm_column)} AS field"
                                for rule in rules if rule.written) or "SELECT NULL AS label, NULL AS field WHERE false"
    # creates: one row per written field of the KOL (first wins where two rules name one column)
    fields: dict[str, str] = {"external_id": "id", "email": "email"}
    for rule in rules:
        value = f"CAST(({rule.kol_column_sql}) AS VARCHAR)"
        if rule.crm_column == FULL_NAME:
            fields.setdefault("first_name", f"NULLIF(regexp_extract(coalesce({value}, ''), '^(.*) [^ ]*$', 1), '')")
            fields.setdefault("last_name", f"NULLIF(regexp_extract(coalesce({value}, ''), '([^ ]*)$', 1), '')")
        elif rule.crm_column not in NOT_WRITTEN:
            fields.setdefault(rule.crm_column, value)
    created = ", ".join(f"{{'field': {sql_literal(name)}, 'value': CAST({value} AS VARCHAR)}}"
                        for name, value in fields.items())
    key = plan_key_sql("action", "kol_id", "crm_id", "field", "new_value")
    # Only the columns the plan reads are taken from the KOLs: all of them (SELECT *) cost 0.5 s at 1M.
    return f"""
SELECT {key} AS plan_key, action, kol_id, crm_id, field, old_value, new_value, kol_name, institution FROM (
  SELECT 'update' AS action, r.kol_id, r.crm_id, w.field, d.crm_value AS old_value, d.kol_value AS new_value,
         r.kol_name, r.institution
  FROM (SELECT kol_id, crm_id, kol_name, institution, unnest(from_json(differences, {_DIFF_TYPE})) AS d
        FROM {RESULT_TABLE} WHERE {this_org} AND status = 'conflict') r
  JOIN ({labels}) w ON w.label = r.d.field
  UNION ALL
  SELECT 'update', kol_id, crm_id, 'external_id', NULL, kol_id, kol_name, institution
  FROM {RESULT_TABLE} WHERE {this_org} AND status = 'conflict' AND external_id IS NULL
  UNION ALL
  SELECT 'create', id, NULL, f.field, NULL, f.value, full_name, institution
  FROM (SELECT id, full_name, institution, unnest([{created}]) AS f FROM {kols_relation} WHERE id IN
        (SELECT kol_id FROM {RESULT_TABLE} WHERE {this_org} AND status = 'missing_in_crm' AND kol_primary
         AND NOT needs_review))
  WHERE f.value IS NOT NULL
)"""


def _records(plan: pa.Table, creates: bool) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(kol_id, record, plan rows) per KOL of the creates, or per contact of the rest (updates, confirms,
    undos: all updates by Id); custom.<key> fields nest under "custom"."""
    grouped: dict[tuple[str, str | None], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for row in plan.to_pylist():
        if (row["action"] == "create") != creates:
            continue
        record, rows = grouped.setdefault((row["kol_id"], row["crm_id"]),
                                          ({} if creates else {"crm_id": row["crm_id"]}, []))
        rows.append(row)
        if row["field"].startswith("custom."):
            record.setdefault("custom", {})[row["field"].removeprefix("custom.")] = row["new_value"]
        else:
            record[row["field"]] = row["new_value"]
    return [(kol_id, record, rows) for (kol_id, _), (record, rows) in grouped.items()]


def _outcome(result: WriteResult | BaseException) -> tuple[bool, str | None, str | None]:
    """(ok, crm id, error) of one per-record result, or of a call that failed as a whole."""
    if isinstance(result, BaseException):
        return False, None, f"{type(result).__name__}: {result}"
    return result.success, result.crm_id, result.error


def held_value(contact: dict[str, Any], field: str) -> str | None:
    """A canonical contact's value of a plan field (custom.<key> from its custom JSON)."""
    if field.startswith("custom."):
        custom = json.loads(contact.get("custom") or "{}")
        value = custom.get(field.removeprefix("custom."))
    else:
        value = contact.get(field)
    return None if value is None else str(value)


def holds(field: str, value: str | None, held: str | None) -> bool:
    """Salesforce holds `value` (it stores what it is sent, emails lower-cased)."""
    if field == "email":
        return normalize_email(value) == normalize_email(held)
    return value == held


def read_back(crm: CrmWriter, crm_ids: Iterable[str | None]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """{crm_id: canonical contact} of these contacts as Salesforce holds them now, or ({}, why not)."""
    ids = sorted({crm_id for crm_id in crm_ids if crm_id})
    if not ids:
        return {}, None
    try:
        table = crm.read_contacts(ids)
    except Exception as error:  # noqa: BLE001 - the audit says it could not read back, and why
        return {}, f"{type(error).__name__}: {error}"
    return {row["crm_id"]: row for row in table.to_pylist()}, None


def apply_plan(plan: pa.Table, crm: CrmWriter, run_id: str = "", org: str = DEFAULT_ORG, user: str | None = None
               ) -> pa.Table:
    """Send the plan (creates as one upsert_contacts call, updates as one update_contacts call), read
    every record back, and return its audit rows: applied (Salesforce holds new_value, in
    crm_value_after), failed ('rejected by Salesforce: ...' or 'not written: ...') or unverified (it
    could not be read back). Never deletes."""
    sent: list[tuple[dict[str, Any], bool, str | None, str | None]] = []  # plan row, ok, crm id, error
    for creates, call in ((True, crm.upsert_contacts), (False, crm.update_contacts)):
        records = _records(plan, creates)
        if not records:
            continue
        try:
            results = list(call([record for _, record, _ in records]))
        except Exception as error:  # noqa: BLE001 - the whole call failed: every record of it, read back below
            results = [error] * len(records)
        for (_, _, rows), result in zip(records, results, strict=False):
            ok, crm_id, error = _outcome(result)
            sent.extend((row, ok, row["crm_id"] or crm_id, error) for row in rows)
    held, unreadable = read_back(crm, (crm_id for _, _, crm_id, _ in sent))
    at = datetime.now(UTC)
    audit = []
    for row, ok, crm_id, error in sent:
        contact = held.get(crm_id) if crm_id else None
        value = held_value(contact, row["field"]) if contact else None
        if contact is not None and holds(row["field"], row["new_value"], value):
            mode, error = "applied", None
        elif unreadable and ok:
            mode, error = "unverified", f"not read back: {unreadable}"
        elif not ok and error:
            mode, error = "failed", f"rejected by Salesforce: {error}"
        elif contact is None:
            mode, error = "failed", "not written: the contact is not in Salesforce when read back"
        else:
            mode, error = "failed", f"not written: Salesforce holds {'∅' if value is None else repr(value)}"
        audit.append({"org": org, "user": user, "run_id": run_id, "at": at, "mode": mode, "action": row["action"],
                      "kol_id": row["kol_id"], "crm_id": crm_id, "field": row["field"], "old_value": row["old_value"],
                      "new_value": row["new_value"], "error": error, "crm_value_after": value if contact else None,
                      "plan_key": row["plan_key"]})
    return audit_table(audit)


def record_dry_run(conn: duckdb.DuckDBPyConnection, org: str, run_id: str, user: str | None,
                   writable: bool) -> WritebackOutcome:
    """Organization `org`'s stored plan recorded as audit rows of mode dry_run (in SQL: a plan at 1M KOLs has some
    130k rows), and what it would do."""
    ensure_tables(conn)
    with transaction(conn):
        conn.execute(f"""
INSERT INTO {AUDIT_TABLE} BY NAME
SELECT org, replace(uuid()::VARCHAR, '-', '') AS audit_id, ? AS "user", ? AS run_id, ? AS at, 'dry_run' AS mode, action,
       kol_id, crm_id, field, old_value, new_value, plan_key
FROM {PLAN_TABLE} WHERE org = ? ORDER BY action DESC, kol_id, crm_id, field""", [user, run_id, datetime.now(UTC), org])
        creates, updates, fields = conn.execute(f"""
SELECT count(DISTINCT kol_id) FILTER (WHERE action = 'create'), count(DISTINCT kol_id) FILTER (WHERE action = 'update'),
       count(*) FROM {PLAN_TABLE} WHERE org = ?""", [org]).fetchone()
    return WritebackOutcome(applied=False, writable=writable, creates=creates, updates=updates, fields=fields, failed=0,
                            needs_review=len(needs_review(conn, org)))


AUDIT = pa.schema(
    [
        ("org", pa.string()), ("audit_id", pa.string()), ("user", pa.string()),
        ("run_id", pa.string()), ("at", pa.timestamp("us", tz="UTC")), ("mode", pa.string()), ("action", pa.string()),
        ("kol_id", pa.string()), ("crm_id", pa.string()), ("field", pa.string()), ("old_value", pa.string()),
        ("new_value", pa.string()), ("error", pa.string()), ("crm_value_after", pa.string()), ("plan_key", pa.string()),
        ("undoes", pa.string()), ("score", pa.float64()), ("erased_at", pa.timestamp("us", tz="UTC")),
    ]
)
assert tuple(AUDIT.names) == column_names(AUDIT_TABLE)


def audit_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Audit rows (dicts with AUDIT columns; audit_id filled in where missing) as a table."""
    return pa.Table.from_pylist([{**row, "audit_id": row.get("audit_id") or uuid.uuid4().hex} for row in rows],
                                schema=AUDIT)


def record_audit(conn: duckdb.DuckDBPyConnection, audit: pa.Table) -> int:
    """Append audit rows to crm_writeback_audit; returns how many."""
    ensure_tables(conn)
    conn.register("_crm_audit_rows", audit)
    try:
        conn.execute(f"INSERT INTO {AUDIT_TABLE} BY NAME SELECT * FROM _crm_audit_rows")
    finally:
        conn.unregister("_crm_audit_rows")
    return audit.num_rows


def needs_review(conn: duckdb.DuckDBPyConnection, org: str = DEFAULT_ORG) -> list[tuple[str, str | None, float | None]]:
    """(kol_id, crm_id, score) of the KOLs write-back leaves alone because a contact probably is that KOL:
    probable_match rows, and KOLs whose best candidate (taken by another KOL) reaches the threshold."""
    return conn.execute(f"""
SELECT kol_id, coalesce(crm_id, json_extract_string(candidates, '$[0].crm_id')),
       coalesce(match_score, json_extract(candidates, '$[0].score')::DOUBLE)
FROM {RESULT_TABLE} WHERE org = ? AND needs_review AND kol_primary ORDER BY kol_id""", [org]).fetchall()
