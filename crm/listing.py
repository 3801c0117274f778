"""What the review page lists, one page at a time: the reconciliation's rows, the write-back plan with
its approvals, the duplicate sets, the audit, and the precision of the probable matches as admins
decided them. All in SQL with LIMIT / OFFSET over the warehouse tables, returned as Arrow: a listing
never holds more than its page, whatever the size of the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

from crm.tables import (APPROVALS_TABLE, AUDIT_TABLE, MASTERS_TABLE, PLAN_TABLE, RESULT_TABLE, RUNS_TABLE, STATUSES,
                        score_band_sql, score_bands)

MAX_LIMIT = 1_000


@dataclass(frozen=True)
class Filter:
    """Rows to list (or decide on): every given criterion must hold. `field`: a differing field (reconciliation)
    or the planned field (plan); `institution` and `text` match case-insensitively as substrings; `decision`
    (plan): approve, exclude or none (undecided)."""

    status: str | None = None
    score_band: str | None = None
    field: str | None = None
    institution: str | None = None
    text: str | None = None
    decision: str | None = None
    kol_id: str | None = None


@dataclass(frozen=True)
class Page:
    rows: pa.Table
    total: int  # rows matching the filter
    offset: int
    limit: int


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").lower() + "%"


def _conditions(flt: Filter, kind: str) -> tuple[list[str], list[object]]:
    """WHERE conditions (with ? parameters) of a filter over the reconciliation (`r`) or the plan (`p`)."""
    where: list[str] = []
    params: list[object] = []
    if flt.status and kind == "result":
        where.append("r.status = ?")
        params.append(flt.status)
    if flt.status and kind == "plan":
        where.append("p.action = ?")
        params.append(flt.status)
    if flt.score_band and kind == "result":
        where.append("r.score_band = ?")
        params.append(flt.score_band)
    if flt.field:
        if kind == "result":
            where.append("(list_contains(json_extract_string(r.differences, '$[*].field'), ?) "
                         "OR list_contains(json_extract_string(r.differences_not_written, '$[*].field'), ?))")
            params += [flt.field, flt.field]
        else:
            where.append("p.field = ?")
            params.append(flt.field)
    alias = "r" if kind == "result" else "p"
    if flt.institution:
        where.append(f"lower({alias}.institution) LIKE ? ESCAPE '\\'")
        params.append(_like(flt.institution))
    if flt.kol_id:
        where.append(f"{alias}.kol_id = ?")
        params.append(flt.kol_id)
    if flt.text:
        columns = ("kol_id", "crm_id", "kol_name", "crm_name", "kol_email", "crm_email") if kind == "result" else (
            "kol_id", "crm_id", "kol_name", "field", "new_value", "old_value")
        where.append("(" + " OR ".join(f"lower({alias}.{c}) LIKE ? ESCAPE '\\'" for c in columns) + ")")
        params += [_like(flt.text)] * len(columns)
    if flt.decision and kind == "plan":
        if flt.decision == "none":
            where.append("a.decision IS NULL")
        else:
            where.append("a.decision = ?")
            params.append(flt.decision)
    return where, params


def _page(conn: duckdb.DuckDBPyConnection, select: str, source: str, where: list[str], params: list[object],
          order: str, offset: int, limit: int) -> Page:
    limit = max(1, min(int(limit), MAX_LIMIT))
    offset = max(0, int(offset))
    condition = " AND ".join(where) or "true"
    total = conn.execute(f"SELECT count(*) FROM {source} WHERE {condition}", params).fetchall()[0][0]
    rows = conn.sql(f"SELECT {select} FROM {source} WHERE {condition} ORDER BY {order} LIMIT {limit} OFFSET {offset}",
                    params=params).to_arrow_table()
    return Page(rows, int(total), offset, limit)


def reconciliation_page(conn: duckdb.DuckDBPyConnection, org: str, flt: Filter = Filter(), offset: int = 0,
                        limit: int = 50) -> Page:
    """Organization `org`'s kol_crm_reconciliation rows matching `flt` (JSON columns as text), problems first."""
    where, params = _conditions(flt, "result")
    order = ", ".join(f"WHEN '{status}' THEN {n}" for n, status in enumerate(PROBLEM_ORDER))
    return _page(conn, """r.status, r.kol_id, r.kol_primary, r.crm_id, r.external_id, r.kol_email, r.crm_email,
       r.kol_name, r.crm_name, r.institution, r.differences::VARCHAR AS differences,
       r.differences_not_written::VARCHAR AS differences_not_written, r.candidates::VARCHAR AS candidates, r.note,
       r.match_score, r.score_band, r.match_reasons::VARCHAR AS match_reasons, r.needs_review, r.duplicate_set_id,
       r.suggested_master""", f"{RESULT_TABLE} r", ["r.org = ?", *where], [org, *params],
                 f"CASE r.status {order} END, r.match_score DESC NULLS LAST, r.kol_id NULLS LAST, r.crm_id", offset, limit)


PROBLEM_ORDER = ("probable_match", "duplicate_in_crm", "conflict", "missing_in_crm", "id_conflict", "orphan_in_crm",
                 "no_email", "duplicate_in_kols", "crm_only", "matched")
assert set(PROBLEM_ORDER) == set(STATUSES)


PLAN_SOURCE = f"{PLAN_TABLE} p LEFT JOIN {APPROVALS_TABLE} a ON a.org = p.org AND a.plan_key = p.plan_key"


def plan_page(conn: duckdb.DuckDBPyConnection, org: str, flt: Filter = Filter(), offset: int = 0,
              limit: int = 50) -> Page:
    """Organization `org`'s planned changes matching `flt`, each with its `decision` (approve, exclude or NULL),
    who decided and when."""
    where, params = _conditions(flt, "plan")
    return _page(conn, """p.plan_key, p.action, p.kol_id, p.crm_id, p.field, p.old_value, p.new_value, p.kol_name,
       p.institution, a.decision, a."user" AS decided_by, a."at" AS decided_at""", PLAN_SOURCE,
                 ["p.org = ?", *where], [org, *params], "p.action DESC, p.kol_id, p.crm_id, p.field", offset, limit)


def plan_fields(conn: duckdb.DuckDBPyConnection, org: str) -> list[str]:
    """The fields the plan writes, for a filter's choices."""
    return [f for (f,) in conn.execute(f"SELECT DISTINCT field FROM {PLAN_TABLE} WHERE org = ? ORDER BY 1", [org]).fetchall()]


def duplicate_sets_page(conn: duckdb.DuckDBPyConnection, org: str, offset: int = 0, limit: int = 50) -> Page:
    """The duplicate sets: suggested master, the admin's chosen master (NULL: none chosen), the master in force,
    and the members (crm_id, name, email, status)."""
    return _page(conn, """duplicate_set_id, suggested_master, master_reason, chosen_master,
       coalesce(chosen_master, suggested_master) AS master, members""", f"""(
SELECT r.duplicate_set_id, any_value(r.suggested_master) AS suggested_master, any_value(r.master_reason) AS master_reason,
       any_value(m.master_crm_id) AS chosen_master,
       list({{'crm_id': r.crm_id, 'name': r.crm_name, 'email': r.crm_email, 'status': r.status}} ORDER BY r.crm_id) AS members
FROM {RESULT_TABLE} r LEFT JOIN {MASTERS_TABLE} m ON m.org = r.org AND m.duplicate_set_id = r.duplicate_set_id
WHERE r.org = ? AND r.duplicate_set_id IS NOT NULL GROUP BY r.duplicate_set_id) s""", [], [org],
                 "duplicate_set_id", offset, limit)


def audit_page(conn: duckdb.DuckDBPyConnection, org: str, offset: int = 0, limit: int = 50,
               kol_id: str | None = None, action: str | None = None) -> Page:
    """Organization `org`'s audit rows, newest first (dry runs left out), with `undone_by` (the audit_id of the
    undo that reverted the row, if any)."""
    where, params = ["a.org = ?", "a.mode <> 'dry_run'"], [org]
    if kol_id:
        where.append("a.kol_id = ?")
        params.append(kol_id)
    if action:
        where.append("a.action = ?")
        params.append(action)
    return _page(conn, """a.audit_id, a."at", a."user", a.mode, a.action, a.kol_id, a.crm_id, a.field, a.old_value,
       a.new_value, a.crm_value_after, a.error, a.undoes, a.erased_at, u.audit_id AS undone_by""",
                 f"""{AUDIT_TABLE} a LEFT JOIN (SELECT org, undoes, any_value(audit_id) AS audit_id FROM {AUDIT_TABLE}
                      WHERE action = 'undo' AND mode = 'applied' GROUP BY ALL) u ON u.org = a.org AND u.undoes = a.audit_id""",
                 where, params, 'a."at" DESC, a.audit_id', offset, limit)


def precision_by_band(conn: duckdb.DuckDBPyConnection, org: str) -> pa.Table:
    """Per score band with a decision: confirmed, rejected, decided and precision (confirmed ÷ decided), beside
    the probable-match threshold of the organization's latest run. Each pair counts once, by its latest decision."""
    threshold = conn.execute(f"SELECT match_threshold FROM {RUNS_TABLE} WHERE org = ? ORDER BY reconciled_at DESC "
                             "LIMIT 1", [org]).fetchall()
    return _precision(conn, org, threshold[0][0] if threshold else None)


def _precision(conn: duckdb.DuckDBPyConnection, org: str, threshold: float | None) -> pa.Table:
    return conn.sql(f"""
WITH latest AS (
  SELECT arg_max(action, "at") AS action, arg_max(score, "at") AS score FROM {AUDIT_TABLE}
  WHERE org = ? AND action IN ('confirm', 'reject') AND mode IN ('applied', 'recorded') AND score IS NOT NULL
  GROUP BY kol_id, crm_id
)
SELECT {score_band_sql('score')} AS band, count(*) FILTER (WHERE action = 'confirm') AS confirmed,
       count(*) FILTER (WHERE action = 'reject') AS rejected, count(*) AS decided,
       round(count(*) FILTER (WHERE action = 'confirm') / count(*), 3) AS precision,
       ?::DOUBLE AS threshold
FROM latest GROUP BY band ORDER BY band""", params=[org, threshold]).to_arrow_table()


__all__ = ["Filter", "Page", "audit_page", "duplicate_sets_page", "plan_fields", "plan_page", "precision_by_band",
           "reconciliation_page", "score_bands"]
