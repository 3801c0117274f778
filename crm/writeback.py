"""The write-back plan (what the CRM should be told) from a reconciliation result, its audit, and
its application through the CRM resource's duck-typed interface.

- missing_in_crm KOL: a create, upserted by external id = KOL id, with every mapped field (the
  name split into first_name / last_name at the last space) and the email; not for a KOL that
  needs review (a contact probably is that KOL: `needs_review`), which would create a duplicate;
- conflict pair: an update of exactly the differing fields whose policy is "kol", plus the
  external id when the contact has none;
- nothing else is written (report-only and CRM-wins fields, duplicates, id conflicts and orphans
  need a person) and nothing is ever deleted.

The plan is long (one row per field) so it audits field by field; `apply_plan` groups it per
record for the CRM calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from crm.reconcile import FULL_NAME, FieldRule
from crm.tables import AUDIT_TABLE, RESULT_TABLE, ensure_tables
from resources.crm.base import WriteResult
from resources.metadata_record import MetadataRecord

PLAN = pa.schema(
    [
        ("action", pa.string()),
        ("kol_id", pa.string()),
        ("crm_id", pa.string()),
        ("field", pa.string()),
        ("old_value", pa.string()),
        ("new_value", pa.string()),
    ]
)


@dataclass(frozen=True)
class WritebackOutcome(MetadataRecord):
    """What a write-back did, or in a dry run would do: its asset's materialization metadata."""

    applied: bool  # False: a dry run
    writable: bool  # False: the CRM is a read-only export
    creates: int  # contacts to create
    updates: int  # contacts to update
    fields: int  # field values in all (the plan's rows)
    failed: int  # audit rows that failed
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
            failed=sum(1 for mode in audit["mode"].to_pylist() if mode == "failed"),
            needs_review=needs_review,
        )


class CrmWriter(Protocol):
    """What apply_plan needs of the CRM resource: per-record results, in input order."""

    def upsert_contacts(self, rows: list[dict[str, Any]]) -> Sequence[WriteResult]: ...

    def update_contacts(self, rows: list[dict[str, Any]]) -> Sequence[WriteResult]: ...


def plan_writeback(
    conn: duckdb.DuckDBPyConnection, rules: Iterable[FieldRule], kols_relation: str = "kols"
) -> pa.Table:
    """The plan (PLAN schema) for the latest result in kol_crm_reconciliation."""
    rules = list(rules)
    by_field = {rule.field: rule for rule in rules}
    rows: list[dict[str, Any]] = []
    conflicts = conn.execute(
        f"SELECT kol_id, crm_id, external_id, differences::VARCHAR FROM {RESULT_TABLE} "
        "WHERE status = 'conflict' ORDER BY kol_id"
    ).fetchall()
    for kol_id, crm_id, external_id, differences in conflicts:
        for difference in json.loads(differences or "[]"):
            rule = by_field.get(difference["field"])
            if rule is None or rule.policy != "kol" or rule.crm_column == FULL_NAME:
                continue
            rows.append({"action": "update", "kol_id": kol_id, "crm_id": crm_id, "field": rule.crm_column,
                         "old_value": difference["crm_value"], "new_value": difference["kol_value"]})
        if external_id is None:
            rows.append({"action": "update", "kol_id": kol_id, "crm_id": crm_id, "field": "external_id",
                         "old_value": None, "new_value": kol_id})
    values = ", ".join(f"CAST(({rule.kol_column_sql}) AS VARCHAR) AS v{i}" for i, rule in enumerate(rules))
    missing = conn.execute(
        f"SELECT id, email, {values} FROM {kols_relation} WHERE id IN "
        f"(SELECT kol_id FROM {RESULT_TABLE} WHERE status = 'missing_in_crm' AND kol_primary AND NOT needs_review) "
        "ORDER BY id"
    ).fetchall()
    for kol_id, email, *mapped in missing:
        create = {"external_id": kol_id, "email": email}
        for rule, value in zip(rules, mapped):
            if rule.crm_column == FULL_NAME:
                first, _, last = (value or "").rpartition(" ")
                create.update(first_name=first or None, last_name=last or None)
            elif rule.policy != "report" or rule.crm_column not in create:
                create[rule.crm_column] = value
        for name, value in create.items():
            if value is not None:
                rows.append({"action": "create", "kol_id": kol_id, "crm_id": None, "field": name,
                             "old_value": None, "new_value": value})
    return pa.Table.from_pylist(rows, schema=PLAN)


def _records(plan: pa.Table, action: str) -> list[tuple[str, dict[str, Any]]]:
    """(kol_id, record) per KOL/contact of one action; custom.<key> fields nest under "custom"."""
    grouped: dict[tuple[str, str | None], dict[str, Any]] = {}
    for row in plan.to_pylist():
        if row["action"] != action:
            continue
        key = (row["kol_id"], row["crm_id"])
        record = grouped.setdefault(key, {"crm_id": row["crm_id"]} if action == "update" else {})
        if row["field"].startswith("custom."):
            record.setdefault("custom", {})[row["field"].removeprefix("custom.")] = row["new_value"]
        else:
            record[row["field"]] = row["new_value"]
    return [(kol_id, record) for (kol_id, _), record in grouped.items()]


def _outcome(result: WriteResult | BaseException) -> tuple[bool, str | None, str | None]:
    """(ok, crm id, error) of one per-record result, or of a call that failed as a whole."""
    if isinstance(result, BaseException):
        return False, None, f"{type(result).__name__}: {result}"
    return result.success, result.crm_id, result.error


def apply_plan(plan: pa.Table, crm: CrmWriter, run_id: str = "") -> pa.Table:
    """Send the plan (creates as one upsert_contacts call, updates as one update_contacts call) and
    return its audit rows (mode applied or failed per field). Never deletes."""
    audit: list[dict[str, Any]] = []
    at = datetime.now(UTC)
    for action, call in (("create", crm.upsert_contacts), ("update", crm.update_contacts)):
        records = _records(plan, action)
        if not records:
            continue
        try:
            results = list(call([record for _, record in records]))
        except Exception as error:  # the whole call failed: every record of it failed
            results = [error] * len(records)
        for (kol_id, record), result in zip(records, results, strict=False):
            ok, crm_id, error = _outcome(result)
            for row in plan.filter(pc.equal(plan["kol_id"], kol_id)).to_pylist():
                if row["action"] == action:
                    audit.append({"run_id": run_id, "at": at, "mode": "applied" if ok else "failed", "action": action,
                                  "kol_id": kol_id, "crm_id": row["crm_id"] or crm_id, "field": row["field"],
                                  "old_value": row["old_value"], "new_value": row["new_value"], "error": error})
    return audit_table(audit)


def dry_run(plan: pa.Table, run_id: str) -> pa.Table:
    """Audit rows of a plan not sent (mode dry_run)."""
    at = datetime.now(UTC)
    return audit_table([dict(row, run_id=run_id, at=at, mode="dry_run", error=None) for row in plan.to_pylist()])


AUDIT = pa.schema(
    [
        ("run_id", pa.string()), ("at", pa.timestamp("us", tz="UTC")), ("mode", pa.string()), ("action", pa.string()),
        ("kol_id", pa.string()), ("crm_id", pa.string()), ("field", pa.string()), ("old_value", pa.string()),
        ("new_value", pa.string()), ("error", pa.string()),
    ]
)


def audit_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Audit rows (dicts with the AUDIT columns) as a table."""
    return pa.Table.from_pylist(rows, schema=AUDIT)


def record_audit(conn: duckdb.DuckDBPyConnection, audit: pa.Table) -> int:
    """Append audit rows to crm_writeback_audit; returns how many."""
    ensure_tables(conn)
    conn.register("_crm_audit_rows", audit)
    try:
        conn.execute(f"INSERT INTO {AUDIT_TABLE} BY NAME SELECT * FROM _crm_audit_rows")
    finally:
        conn.unregister("_crm_audit_rows")
    return audit.num_rows


def needs_review(conn: duckdb.DuckDBPyConnection) -> list[tuple[str, str | None, float | None]]:
    """(kol_id, crm_id, score) of the KOLs write-back leaves alone because a contact probably is that KOL:
    probable_match rows, and KOLs whose best candidate (taken by another KOL) reaches the threshold."""
    return conn.execute(f"""
SELECT kol_id, coalesce(crm_id, json_extract_string(candidates, '$[0].crm_id')),
       coalesce(match_score, json_extract(candidates, '$[0].score')::DOUBLE)
FROM {RESULT_TABLE} WHERE needs_review AND kol_primary ORDER BY kol_id""").fetchall()
