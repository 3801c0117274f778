"""Which audited changes can be undone, and the privacy tombstone that makes a row un-undoable.

An applied update or confirm can be undone: its old value is written back (itself audited, action undo,
`undoes` naming the row). Refused, with the reason: a create (we never delete), a row erased for privacy
(`erased_at` set: its values are gone), a row older than the undo window (COMMOPS_UNDO_WINDOW_DAYS, default
30 days), a row not applied, a row already undone, and (checked against Salesforce by crm.actions.undo)
a field whose value in the CRM changed since the change.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb

from crm.tables import AUDIT_TABLE, ensure_tables

UNDO_WINDOW_ENV = "COMMOPS_UNDO_WINDOW_DAYS"
UNDOABLE = ("update", "confirm")


class UndoRefusedError(RuntimeError):
    """Base of crm.actions.UndoRefused; the message is one line saying why."""


def undo_window_days() -> int:
    """COMMOPS_UNDO_WINDOW_DAYS (CrmSettings), default 30."""
    from resources.crm.settings import CrmSettings  # noqa: PLC0415 - settings read when asked, not at import

    return CrmSettings().commops_undo_window_days


def undo_refusal(row: dict[str, Any] | None, audit_id: str, org: str, *, undone_by: str | None, now: datetime,
                 window_days: int) -> str | None:
    """Why the audit row cannot be undone (checks that need no CRM), or None."""
    if row is None:
        return f"no change {audit_id} in the audit of organization {org}"
    if row["erased_at"] is not None:
        return f"change {audit_id} was erased for privacy on {row['erased_at']:%Y-%m-%d}: its values are gone"
    if row["action"] == "create":
        return (f"change {audit_id} created contact {row['crm_id'] or '(unknown)'}: a create is never undone, "
                "we never delete contacts (delete it in Salesforce if it must go)")
    if row["action"] not in UNDOABLE:
        return f"change {audit_id} is a {row['action']}: only applied updates and confirms can be undone"
    if row["mode"] != "applied":
        return f"change {audit_id} was not applied ({row['mode']}): there is nothing to undo"
    if undone_by:
        return f"change {audit_id} was undone already ({undone_by})"
    if row["at"] < now - timedelta(days=window_days):
        return (f"change {audit_id} was applied on {row['at']:%Y-%m-%d}, more than {window_days} days ago "
                f"({UNDO_WINDOW_ENV}): change the field in Salesforce instead")
    return None


def audit_row(conn: duckdb.DuckDBPyConnection, org: str, audit_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the audit row as a dict, audit_id of an applied undo of it or None)."""
    ensure_tables(conn)
    cursor = conn.execute(f"SELECT * FROM {AUDIT_TABLE} WHERE org = ? AND audit_id = ?", [org, audit_id])
    names = [d[0] for d in cursor.description]
    found = cursor.fetchall()
    if not found:
        return None, None
    found = found[0]
    undone = conn.execute(f"SELECT any_value(audit_id) FROM {AUDIT_TABLE} WHERE org = ? AND undoes = ? AND action = 'undo' "
                          "AND mode = 'applied'", [org, audit_id]).fetchall()[0][0]
    return dict(zip(names, found)), undone


def erase_kol(conn: duckdb.DuckDBPyConnection, org: str, kol_id: str, now: datetime | None = None) -> int:
    """Erase a KOL's personal data from the audit (a data subject's request): the values of its rows are
    emptied, the rows stay with `erased_at` set (the tombstone), and none of them can be undone. Returns how
    many rows were erased."""
    ensure_tables(conn)
    return conn.execute(f"""UPDATE {AUDIT_TABLE} SET old_value = NULL, new_value = NULL, crm_value_after = NULL,
       error = CASE WHEN error IS NULL THEN NULL ELSE 'erased' END, erased_at = ?
WHERE org = ? AND kol_id = ? AND erased_at IS NULL""", [now or datetime.now(UTC), org, kol_id]).fetchall()[0][0]
