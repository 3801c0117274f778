"""What a CRM admin does, from the command line or the review page: apply the approved changes, undo a
change, confirm or reject probable matches (one or many, or from a decisions file), choose a duplicate
set's master. Each one audited in crm_writeback_audit with the acting user, and analytics.duckdb
republished after it.

The warehouse is held only to read and to record (short writer sessions); the CRM is called between
them, so a slow Salesforce never holds up a sync. Every refusal is an ActionRefused whose message is
one line for the user.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from crm import approvals, decisions_csv, review, undo as undo_rules, writeback
from crm.report import write_merge_for
from crm.tables import MASTERS_TABLE, RESULT_TABLE, ensure_tables
from resources.warehouse import WarehouseResource

OUTCOME = pa.schema([
    ("audit_id", pa.string()), ("plan_key", pa.string()), ("action", pa.string()), ("kol_id", pa.string()),
    ("crm_id", pa.string()), ("field", pa.string()), ("old_value", pa.string()), ("new_value", pa.string()),
    ("mode", pa.string()), ("crm_value_after", pa.string()), ("error", pa.string()),
])
DECISION_REPORT = pa.schema([
    ("line", pa.int64()), ("decision", pa.string()), ("kol_id", pa.string()), ("crm_id", pa.string()),
    ("plan_key", pa.string()), ("taken", pa.bool_()), ("reason", pa.string()),
])


class ActionRefused(RuntimeError):
    """An admin's action that cannot be done; str() is one line saying why (and what to do)."""


class UndoRefused(ActionRefused, undo_rules.UndoRefusedError):
    pass


class DecisionRefused(ActionRefused):
    pass


@contextmanager
def _live(crm: Any) -> Iterator[Any]:
    """The CRM resource ready to call: a Dagster resource outside a run gets its EnvVar secrets resolved."""
    if not getattr(crm, "writable", False):
        raise ActionRefused(f"this writes to Salesforce, and the CRM is {getattr(crm, 'source_name', 'not configured')} "
                            "(read-only): unset COMMOPS_CRM_CSV and set the SALESFORCE_* login")
    opener = getattr(crm, "process_config_and_initialize_cm", None)
    with (opener() if opener else nullcontext(crm)) as live:
        yield live


def _outcome(audit: pa.Table) -> pa.Table:
    return audit.select(OUTCOME.names).cast(OUTCOME)


def _record(warehouse: WarehouseResource, audit: pa.Table) -> None:
    with warehouse.writer() as session:
        writeback.record_audit(session.conn, audit)
        _forget_applied(session.conn, audit)
    warehouse.publish_analytics()


def _forget_applied(conn: Any, audit: pa.Table) -> None:
    """Planned changes now applied leave the stored plan (and their approvals): never written twice."""
    done = audit.filter(pc.and_(pc.equal(audit["mode"], "applied"), pc.is_valid(audit["plan_key"]))
                        ).select(["org", "plan_key"])
    if not done.num_rows:
        return
    conn.register("_applied_keys", done)
    try:
        for table in ("crm_writeback_plan", "crm_writeback_approvals"):
            conn.execute(f"DELETE FROM {table} t USING _applied_keys k WHERE t.org = k.org AND t.plan_key = k.plan_key")
    finally:
        conn.unregister("_applied_keys")


def apply_approved(warehouse: WarehouseResource, crm: Any, org: str, user: str,
                   plan_keys: Sequence[str] | None = None) -> pa.Table:
    """Write the approved planned changes (among `plan_keys` when given) as `--apply` does, read them back, audit
    them; returns each row's OUTCOME. Nothing approved: an empty table, nothing sent."""
    with warehouse.writer() as session:
        plan = approvals.plan_to_apply(session.conn, org, approved_only=True, plan_keys=plan_keys)
    if not plan.num_rows:
        return OUTCOME.empty_table()
    run_id = "approved-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    with _live(crm) as live:
        audit = writeback.apply_plan(plan, live, run_id=run_id, org=org, user=user)
    _record(warehouse, audit)
    return _outcome(audit)


def undo(warehouse: WarehouseResource, crm: Any, org: str, audit_id: str, user: str, *,
         now: datetime | None = None, window_days: int | None = None) -> pa.Table:
    """Write the audited old value of an applied update or confirm back to Salesforce, read it back and audit
    it (action undo, undoes = audit_id); returns its OUTCOME row. UndoRefused says why when it cannot be
    undone, including when Salesforce's value changed since the change (read back first)."""
    now = now or datetime.now(UTC)
    window = undo_rules.undo_window_days() if window_days is None else window_days
    with warehouse.writer() as session:
        row, undone_by = undo_rules.audit_row(session.conn, org, audit_id)
    refusal = undo_rules.undo_refusal(row, audit_id, org, undone_by=undone_by, now=now, window_days=window)
    if refusal:
        raise UndoRefused(refusal)
    field, crm_id = row["field"], row["crm_id"]
    with _live(crm) as live:
        held, unreadable = writeback.read_back(live, [crm_id])
        if unreadable:
            raise UndoRefused(f"cannot read contact {crm_id} back from Salesforce ({unreadable}): try again later")
        if crm_id not in held:
            raise UndoRefused(f"contact {crm_id} is no longer in Salesforce: nothing to undo")
        now_held = writeback.held_value(held[crm_id], field)
        if not writeback.holds(field, row["new_value"], now_held):
            raise UndoRefused(f"{field} of contact {crm_id} changed in Salesforce since change {audit_id} "
                              f"(it holds {'∅' if now_held is None else repr(now_held)}, the change wrote "
                              f"{row['new_value']!r}): fix it in Salesforce by hand")
        plan = pa.Table.from_pylist([{"plan_key": None, "action": "undo", "kol_id": row["kol_id"], "crm_id": crm_id,
                                      "field": field, "old_value": now_held, "new_value": row["old_value"],
                                      "kol_name": None, "institution": None}], schema=writeback.PLAN)
        audit = writeback.apply_plan(plan, _Undoing(live), run_id=row["run_id"] or "", org=org, user=user)
    audit = audit.set_column(audit.schema.get_field_index("undoes"), "undoes", pa.array([audit_id], pa.string()))
    _record(warehouse, audit)
    return _outcome(audit)


class _Undoing:
    """Sends an undo row as an update, emptying the field where the old value was none."""

    def __init__(self, crm: Any):
        self._crm = crm

    def upsert_contacts(self, rows: list[dict[str, Any]]) -> list:
        raise AssertionError("an undo never creates")

    def update_contacts(self, rows: list[dict[str, Any]]) -> list:
        fixed = []
        for row in rows:
            cleared = [name for name, value in row.items() if name != "crm_id" and value is None]
            cleared += [f"custom.{key}" for key, value in (row.get("custom") or {}).items() if value is None]
            fixed.append({**{k: v for k, v in row.items() if v is not None}, "clear": cleared})
        return self._crm.update_contacts(fixed)

    def read_contacts(self, crm_ids: Sequence[str]) -> pa.Table:
        return self._crm.read_contacts(crm_ids)


def decide_pairs(warehouse: WarehouseResource, crm: Any, org: str, decisions: Sequence[tuple[str, str, str]],
                 user: str, *, lines: Sequence[int] | None = None) -> pa.Table:
    """Confirm or reject probable matches in bulk: `decisions` are (confirm|reject, kol_id, crm_id). Same audited
    decisions as `commops reconcile confirm|reject`; the confirms go to Salesforce in one call and are read back.
    Returns DECISION_REPORT, one row per decision (taken, and what was done or why not)."""
    lines = list(lines) if lines is not None else list(range(1, len(decisions) + 1))
    report: list[dict[str, Any]] = []
    confirms: list[tuple[int, str, str, str | None, float | None]] = []
    audits: list[pa.Table] = []
    with warehouse.writer() as session:
        if not session.exists(review.CONTACTS_TABLE):
            raise DecisionRefused("no CRM contacts in the warehouse yet: run `commops reconcile` first")
        for line, (decision, kol_id, crm_id) in zip(lines, decisions, strict=True):
            entry = {"line": line, "decision": decision, "kol_id": kol_id, "crm_id": crm_id, "plan_key": None}
            if decision not in decisions_csv.PAIR_DECISIONS:
                report.append({**entry, "taken": False, "reason": f"decision {decision!r} is not confirm or reject"})
                continue
            try:
                old = review.check_pair(session.conn, kol_id, crm_id, org)
            except review.ReviewError as error:
                report.append({**entry, "taken": False, "reason": str(error)})
                continue
            score = review.pair_score(session.conn, kol_id, crm_id, org)
            if decision == "reject":
                if old == kol_id:
                    report.append({**entry, "taken": False, "reason": f"contact {crm_id} carries {kol_id} as its "
                                   "external id (confirmed): undo the confirm first"})
                elif review.remember_rejection(warehouse.data_dir, kol_id, crm_id):
                    audits.append(review.audit_row("reject", "recorded", kol_id, crm_id, org=org, user=user, score=score))
                    report.append({**entry, "taken": True, "reason": "rejected: the pair is not proposed again"})
                else:
                    report.append({**entry, "taken": False, "reason": "rejected before: nothing to do"})
            elif old == kol_id:
                report.append({**entry, "taken": False, "reason": f"contact {crm_id} carries {kol_id} already: nothing to do"})
            elif old:
                report.append({**entry, "taken": False, "reason": f"contact {crm_id} already carries the external id "
                               f"{old}: confirm that KOL, or clear the field in Salesforce first"})
            else:
                confirms.append((len(report), kol_id, crm_id, old, score))
                report.append({**entry, "taken": False, "reason": "pending"})
    if confirms and not getattr(crm, "writable", False):
        why = (f"a confirm writes the KOL id to the contact in Salesforce, and the CRM is "
               f"{getattr(crm, 'source_name', 'not configured')}: set the SALESFORCE_* login")
        for index, *_ in confirms:
            report[index]["reason"] = why
        confirms = []
    if confirms:
        with _live(crm) as live:
            plan = pa.Table.from_pylist([{"plan_key": None, "action": "confirm", "kol_id": kol_id, "crm_id": crm_id,
                                          "field": "external_id", "old_value": old, "new_value": kol_id,
                                          "kol_name": None, "institution": None}
                                         for _, kol_id, crm_id, old, _ in confirms], schema=writeback.PLAN)
            audit = writeback.apply_plan(plan, live, org=org, user=user)
        audit = audit.set_column(audit.schema.get_field_index("score"), "score",
                                 pa.array([score for *_, score in confirms], pa.float64()))
        audits.append(audit)
        for (index, *_), mode, error in zip(confirms, audit["mode"].to_pylist(), audit["error"].to_pylist(), strict=True):
            report[index]["taken"] = mode == "applied"
            report[index]["reason"] = ("confirmed: the contact carries the KOL id in Salesforce (read back)"
                                       if mode == "applied" else error)
    if audits:
        _record(warehouse, pa.concat_tables(audits))
    return pa.Table.from_pylist(report, schema=DECISION_REPORT)


def apply_decisions_file(warehouse: WarehouseResource, crm: Any, org: str, data: bytes, user: str) -> pa.Table:
    """The decisions of a file an admin filled in (the reconciliation CSV: confirm / reject; the plan CSV:
    approve / exclude), as Excel saves it. Returns DECISION_REPORT, one row per row with a decision, in file
    order. DecisionRefused when the file as a whole cannot be read."""
    try:
        parsed = decisions_csv.parse(data)
    except decisions_csv.DecisionsFileError as error:
        raise DecisionRefused(str(error)) from None
    bad = [{"line": r.line, "decision": r.decision, "kol_id": r.kol_id, "crm_id": r.crm_id, "plan_key": r.plan_key,
            "taken": False, "reason": r.problem} for r in parsed.rows if r.problem]
    good = [r for r in parsed.rows if not r.problem]
    if parsed.kind == "pairs":
        taken = decide_pairs(warehouse, crm, org, [(r.decision, r.kol_id, r.crm_id) for r in good], user,
                             lines=[r.line for r in good]) if good else DECISION_REPORT.empty_table()
        report = bad + taken.to_pylist()
    else:
        report = bad + _decide_plan_rows(warehouse, org, good, user)
    report.sort(key=lambda row: row["line"])
    return pa.Table.from_pylist(report, schema=DECISION_REPORT)


def _decide_plan_rows(warehouse: WarehouseResource, org: str, rows: list[decisions_csv.Row], user: str) -> list[dict]:
    report = []
    with warehouse.writer() as session:
        ensure_tables(session.conn)
        planned = approvals.planned_keys(session.conn, org, [r.plan_key for r in rows])
        for decision in decisions_csv.PLAN_DECISIONS:
            keys = [r.plan_key for r in rows if r.decision == decision and r.plan_key in planned]
            if keys:
                approvals.set_decision(session.conn, org, user, decision, plan_keys=keys)
    for r in rows:
        entry = {"line": r.line, "decision": r.decision, "kol_id": r.kol_id, "crm_id": r.crm_id, "plan_key": r.plan_key}
        if r.plan_key in planned:
            report.append({**entry, "taken": True, "reason": "approved: written by the next apply of approved changes"
                           if r.decision == "approve" else "excluded: never written while the change stays the same"})
        else:
            report.append({**entry, "taken": False, "reason": "not in the current plan (a newer reconciliation "
                           "changed it): download the plan CSV again"})
    if rows:
        warehouse.publish_analytics()
    return report


def choose_master(warehouse: WarehouseResource, org: str, duplicate_set_id: str, crm_id: str, user: str) -> None:
    """Make `crm_id` the master of its duplicate set (the suggested one again: the choice is dropped); the merge
    CSV (latest-merge.csv) is written again to follow it. Audited (action choose_master). Nothing is merged."""
    with warehouse.writer() as session:
        ensure_tables(session.conn)
        found = session.conn.execute(
            f"SELECT any_value(suggested_master), bool_or(crm_id = ?) FROM {RESULT_TABLE} WHERE org = ? AND "
            "duplicate_set_id = ?", [crm_id, org, duplicate_set_id]).fetchall()[0]
        if found[1] is None:
            raise ActionRefused(f"no duplicate set {duplicate_set_id} in organization {org}'s latest reconciliation")
        if not found[1]:
            raise ActionRefused(f"contact {crm_id} is not in duplicate set {duplicate_set_id}: choose one of its contacts")
        session.conn.execute(f"DELETE FROM {MASTERS_TABLE} WHERE org = ? AND duplicate_set_id = ?", [org, duplicate_set_id])
        if crm_id != found[0]:
            session.conn.execute(f'INSERT INTO {MASTERS_TABLE} (org, duplicate_set_id, master_crm_id, "user", "at") '
                                 "VALUES (?, ?, ?, ?, ?)", [org, duplicate_set_id, crm_id, user, datetime.now(UTC)])
        audit = writeback.audit_table([{"org": org, "user": user, "run_id": "", "at": datetime.now(UTC),
                                        "mode": "recorded", "action": "choose_master", "crm_id": crm_id,
                                        "field": "duplicate_set_id", "new_value": duplicate_set_id}])
        writeback.record_audit(session.conn, audit)
        write_merge_for(session.conn, warehouse.data_dir, org)
    warehouse.publish_analytics()
