"""CRM admins' approvals of the write-back plan: approve or exclude a planned change, per row, per KOL or
every row a filter matches. Kept in crm_writeback_approvals (org + plan_key), each decision audited.

A plan_key names the change itself (action, KOL, contact, field, new value), so a decision carries over
to the next run's plan while the change is the same, and lapses when the value to write changes.
Approving writes nothing: `crm.actions.apply_approved` writes the approved rows; `--apply` writes the
whole plan less the excluded rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

import duckdb
import pyarrow as pa

from crm.listing import PLAN_SOURCE, Filter, _conditions
from crm.tables import APPROVALS_TABLE, AUDIT_TABLE, PLAN_TABLE, ensure_tables
from crm.writeback import PLAN
from resources.sql import transaction

Decision = Literal["approve", "exclude", "clear"]
DECISIONS = ("approve", "exclude", "clear")


def plan_to_apply(conn: duckdb.DuckDBPyConnection, org: str, *, approved_only: bool,
                  plan_keys: Sequence[str] | None = None) -> pa.Table:
    """The stored plan's rows to write: approved ones (`approved_only`), or all but the excluded ones;
    only among `plan_keys` when given."""
    ensure_tables(conn)
    where = ["p.org = ?"]
    params: list[object] = [org]
    if approved_only:
        where.append("a.decision = 'approve'")
    else:
        where.append("a.decision IS DISTINCT FROM 'exclude'")
    if plan_keys is not None:
        conn.register("_approval_keys", pa.table({"plan_key": pa.array(list(plan_keys), pa.string())}))
        where.append("p.plan_key IN (SELECT plan_key FROM _approval_keys)")
    try:
        result = conn.sql(f"SELECT {', '.join('p.' + name for name in PLAN.names)} FROM {PLAN_SOURCE} "
                              f"WHERE {' AND '.join(where)} ORDER BY p.action DESC, p.kol_id, p.crm_id, p.field",
                          params=params).to_arrow_table()
    finally:
        if plan_keys is not None:
            conn.unregister("_approval_keys")
    return result.cast(PLAN)


def set_decision(conn: duckdb.DuckDBPyConnection, org: str, user: str, decision: Decision, *,
                 plan_keys: Sequence[str] | None = None, kol_ids: Sequence[str] | None = None) -> int:
    """Approve, exclude or clear the planned changes named by plan key and/or by KOL (every change of that KOL);
    returns how many planned rows it covered. Unknown keys are ignored (the listing shows what exists)."""
    keys = pa.table({"plan_key": pa.array(list(plan_keys or []), pa.string())})
    kols = pa.table({"kol_id": pa.array(list(kol_ids or []), pa.string())})
    conn.register("_decide_keys", keys)
    conn.register("_decide_kols", kols)
    try:
        return _decide(conn, org, user, decision, "(p.plan_key IN (SELECT plan_key FROM _decide_keys) "
                       "OR p.kol_id IN (SELECT kol_id FROM _decide_kols))", [])
    finally:
        conn.unregister("_decide_keys")
        conn.unregister("_decide_kols")


def set_decision_matching(conn: duckdb.DuckDBPyConnection, org: str, user: str, decision: Decision, flt: Filter) -> int:
    """Approve, exclude or clear every planned change the filter matches ("approve all matching this filter")."""
    where, params = _conditions(flt, "plan")
    return _decide(conn, org, user, decision, " AND ".join(where) or "true", params)


def _decide(conn: duckdb.DuckDBPyConnection, org: str, user: str, decision: str, condition: str,
            params: list[object]) -> int:
    if decision not in DECISIONS:
        raise ValueError(f"decision must be approve, exclude or clear, not {decision!r}")
    ensure_tables(conn)
    at = datetime.now(UTC)
    with transaction(conn):
        conn.execute(f"""CREATE OR REPLACE TEMP TABLE _decided AS
SELECT p.plan_key, p.kol_id, p.crm_id, p.field, p.old_value, p.new_value, p.run_id, a.decision AS before
FROM {PLAN_SOURCE} WHERE p.org = ? AND {condition}""", [org, *params])
        count = conn.execute("SELECT count(*) FROM _decided").fetchall()[0][0]
        conn.execute(f"DELETE FROM {APPROVALS_TABLE} WHERE org = ? AND plan_key IN (SELECT plan_key FROM _decided)", [org])
        if decision != "clear":
            conn.execute(f'INSERT INTO {APPROVALS_TABLE} (org, plan_key, kol_id, decision, "user", "at") '
                         "SELECT ?, plan_key, kol_id, ?, ?, ? FROM _decided", [org, decision, user, at])
        # audited in SQL too: "approve all" over 100k rows stays one statement
        conn.execute(f"""INSERT INTO {AUDIT_TABLE} (org, audit_id, "user", run_id, "at", mode, action, kol_id, crm_id, field,
                         old_value, new_value, plan_key)
SELECT ?, uuid()::VARCHAR, ?, run_id, ?, 'recorded', ?, kol_id, crm_id, field, old_value, new_value, plan_key
FROM _decided WHERE before IS DISTINCT FROM ?""",
                     [org, user, at, "clear_decision" if decision == "clear" else decision,
                      None if decision == "clear" else decision])
        conn.execute("DROP TABLE _decided")
    return int(count)


def decisions_of(conn: duckdb.DuckDBPyConnection, org: str, plan_keys: Sequence[str]) -> dict[str, str]:
    """{plan_key: decision} of these keys (a small lookup: the decisions file's rows)."""
    conn.register("_lookup_keys", pa.table({"plan_key": pa.array(list(plan_keys), pa.string())}))
    try:
        return dict(conn.execute(f"SELECT plan_key, decision FROM {APPROVALS_TABLE} WHERE org = ? AND plan_key IN "
                                 "(SELECT plan_key FROM _lookup_keys)", [org]).fetchall())
    finally:
        conn.unregister("_lookup_keys")


def planned_keys(conn: duckdb.DuckDBPyConnection, org: str, plan_keys: Sequence[str]) -> set[str]:
    """The keys among these that are in the organization's current plan."""
    conn.register("_lookup_keys", pa.table({"plan_key": pa.array(list(plan_keys), pa.string())}))
    try:
        return {k for (k,) in conn.execute(f"SELECT plan_key FROM {PLAN_TABLE} WHERE org = ? AND plan_key IN "
                                           "(SELECT plan_key FROM _lookup_keys)", [org]).fetchall()}
    finally:
        conn.unregister("_lookup_keys")
