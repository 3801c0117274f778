"""What the page reads: the published analytics.duckdb, opened read-only for one request.

Every action republishes the warehouse (crm/actions.py), so the copy shows the page's own actions at
once; a nightly sync holding the warehouse's writer lock never makes the page wait. Lists come a page at
a time from crm/listing.py (SQL LIMIT / OFFSET); nothing here holds more than a page and the counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from crm.tables import APPROVALS_TABLE, AUDIT_TABLE, PLAN_TABLE, RESULT_TABLE, RUNS_TABLE, STATUSES


class NothingYet(RuntimeError):
    """No reconciliation to show yet; the message says what to run."""


@contextmanager
def published(analytics_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    if not analytics_path.exists():
        raise NothingYet(f"no analytics.duckdb in {analytics_path.parent} yet: run `commops sync`, then `commops reconcile`")
    conn = duckdb.connect(str(analytics_path), read_only=True, config={"threads": 1})
    try:
        if not has_table(conn, RUNS_TABLE):
            raise NothingYet("no reconciliation yet: run `commops reconcile`")
        yield conn
    finally:
        conn.close()


def has_table(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchall()[0][0])


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def _dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


@dataclass(frozen=True)
class OrgRun:
    """An organization's latest reconciliation."""

    org: str
    run: dict[str, Any]  # its reconciliation_runs row

    @property
    def counts(self) -> dict[str, int]:
        return {status: int(self.run.get(status) or 0) for status in STATUSES}


def organizations(conn: duckdb.DuckDBPyConnection) -> list[OrgRun]:
    """Each organization's latest run, by name."""
    found = _dicts(conn.execute(f"SELECT * FROM {RUNS_TABLE} QUALIFY row_number() OVER "
                                "(PARTITION BY org ORDER BY reconciled_at DESC) = 1 ORDER BY org"))
    return [OrgRun(run["org"], run) for run in found]


def latest_run(conn: duckdb.DuckDBPyConnection, org: str) -> OrgRun | None:
    found = _dicts(conn.execute(f"SELECT * FROM {RUNS_TABLE} WHERE org = ? ORDER BY reconciled_at DESC LIMIT 1", [org]))
    return OrgRun(org, found[0]) if found else None


@dataclass(frozen=True)
class ToDo:
    probable_matches: int  # pairs to confirm or reject
    duplicate_sets: int  # sets to merge in Salesforce
    awaiting_approval: int  # planned changes neither approved nor excluded
    approved: int  # approved, not applied yet


def to_do(conn: duckdb.DuckDBPyConnection, org: str) -> ToDo:
    (sets,), = conn.execute(f"SELECT count(DISTINCT duplicate_set_id) FROM {RESULT_TABLE} WHERE org = ?",
                            [org]).fetchall()
    matches = undecided_matches(conn, org) if has_table(conn, AUDIT_TABLE) else 0
    waiting = approved = 0
    if has_table(conn, PLAN_TABLE):
        (waiting, approved), = conn.execute(
            f"SELECT count(*) FILTER (WHERE a.decision IS NULL), count(*) FILTER (WHERE a.decision = 'approve') "
            f"FROM {PLAN_TABLE} p LEFT JOIN {APPROVALS_TABLE} a ON a.org = p.org AND a.plan_key = p.plan_key "
            "WHERE p.org = ?", [org]).fetchall()
    return ToDo(int(matches), int(sets), int(waiting), int(approved))


_PAIR_DECISIONS = f"""
SELECT kol_id, crm_id, arg_max(action, "at") AS action, arg_max("user", "at") AS "user", max("at") AS "at"
FROM {AUDIT_TABLE} WHERE org = ? AND action IN ('confirm', 'reject', 'undo') AND mode IN ('applied', 'recorded')
  AND (action <> 'undo' OR field = 'external_id') GROUP BY kol_id, crm_id"""


def pair_decisions(conn: duckdb.DuckDBPyConnection, org: str, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """The latest decision (confirm or reject, with who and when) on each of these pairs since they were proposed:
    the list shows the last reconciliation, which a decision changes only at the next one."""
    if not pairs:
        return {}
    wanted = pa.table({"kol_id": [k for k, _ in pairs], "crm_id": [c for _, c in pairs]})
    conn.register("_page_pairs", wanted)
    try:
        found = _dicts(conn.execute(f"SELECT d.* FROM ({_PAIR_DECISIONS}) d JOIN _page_pairs p USING (kol_id, crm_id) "
                                    "WHERE d.action <> 'undo'", [org]))
    finally:
        conn.unregister("_page_pairs")
    return {(d["kol_id"], d["crm_id"]): d for d in found}


def undecided_matches(conn: duckdb.DuckDBPyConnection, org: str) -> int:
    """Probable matches of the latest run nobody has confirmed or rejected since."""
    return int(conn.execute(
        f"SELECT count(*) FROM {RESULT_TABLE} r LEFT JOIN ({_PAIR_DECISIONS}) d USING (kol_id, crm_id) "
        "WHERE r.org = ? AND r.status = 'probable_match' AND (d.action IS NULL OR d.action = 'undo')",
        [org, org]).fetchall()[0][0])


def institutions_like(conn: duckdb.DuckDBPyConnection, org: str, limit: int = 200) -> list[str]:
    """The most frequent institutions, for the filter's suggestions."""
    return [name for (name,) in conn.execute(
        f"SELECT institution FROM {RESULT_TABLE} WHERE org = ? AND institution IS NOT NULL GROUP BY 1 "
        f"ORDER BY count(*) DESC, 1 LIMIT {int(limit)}", [org]).fetchall()]


def difference_fields(conn: duckdb.DuckDBPyConnection, org: str) -> list[str]:
    """The fields that differ somewhere in the organization's result, for the field filter."""
    return [f for (f,) in conn.execute(
        f"SELECT DISTINCT unnest(json_extract_string(differences, '$[*].field')) AS f FROM {RESULT_TABLE} "
        "WHERE org = ? AND differences IS NOT NULL ORDER BY 1", [org]).fetchall()]


def parsed(value: str | None) -> Any:
    """A JSON column as listing returns it (text), parsed; None stays None."""
    return json.loads(value) if value else None
