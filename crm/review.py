"""An admin's answer to a probable match: confirm it or reject it.

- confirm KOL CONTACT: the KOL id is written to the contact's external-id field in the CRM (the
  same update write-back uses), so from the next run on the contact is that KOL's by its external
  id; one crm_writeback_audit row (action confirm, applied or failed).
- reject KOL CONTACT: the pair is remembered in $COMMOPS_DATA_DIR/crm/rejected-pairs.csv and never
  proposed again. The file, not the warehouse, holds it: the warehouse can be rebuilt from the API
  and the CRM at any time, an admin's decision cannot. Admins open it in a spreadsheet, so it is
  written and read back through spreadsheet_csv. One audit row (action reject, mode recorded).
"""

from __future__ import annotations

import csv
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from crm import spreadsheet_csv
from crm.tables import CONTACTS_TABLE, DEFAULT_ORG, RESULT_TABLE
from crm.writeback import audit_table, held_value, read_back

REJECTIONS_FILE = Path("crm") / "rejected-pairs.csv"
REJECTION_COLUMNS = ("kol_id", "crm_id", "rejected_at")


class ReviewError(RuntimeError):
    """A confirm or reject that cannot be done; the message is one line saying why and what to do."""


class ContactUpdater(Protocol):
    def update_contacts(self, rows: list[dict[str, Any]]) -> list: ...

    def read_contacts(self, crm_ids: list[str]) -> pa.Table: ...


def rejections_path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / REJECTIONS_FILE


def load_rejections(data_dir: str | os.PathLike[str]) -> pa.Table:
    """The rejected (kol_id, crm_id) pairs; empty when none were rejected."""
    path = rejections_path(data_dir)
    pairs: list[tuple[str, str]] = []
    if path.exists():
        with path.open(encoding="utf-8", newline="") as handle:
            pairs = [(row["kol_id"], row["crm_id"]) for row in csv.DictReader(handle)]
    return spreadsheet_csv.restore(pa.table({"kol_id": pa.array([k for k, _ in pairs], pa.string()),
                                             "crm_id": pa.array([c for _, c in pairs], pa.string())}))


def remember_rejection(data_dir: str | os.PathLike[str], kol_id: str, crm_id: str) -> bool:
    """Append the pair to rejected-pairs.csv; False when it was rejected before."""
    if (kol_id, crm_id) in set(zip(*load_rejections(data_dir).to_pydict().values())):
        return False
    path = rejections_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(REJECTION_COLUMNS)
        row = pa.table({"kol_id": [kol_id], "crm_id": [crm_id],
                        "rejected_at": [datetime.now(UTC).isoformat(timespec="seconds")]})
        writer.writerows(spreadsheet_csv.rows(spreadsheet_csv.neutralise(row)))
    return True


def check_pair(conn: duckdb.DuckDBPyConnection, kol_id: str, crm_id: str, org: str = DEFAULT_ORG) -> str | None:
    """The contact's current external id, after checking that both records are in the warehouse (the
    KOL an active KOL of the organization, the contact among the CRM contacts its last reconciliation read)."""
    if not conn.execute("SELECT count(*) FROM kols WHERE id = ? AND org = ? AND is_archived IS NOT TRUE",
                        [kol_id, org]).fetchall()[0][0]:
        raise ReviewError(f"KOL {kol_id} is not an active KOL of organization {org}: check the id "
                          "(kol_crm_reconciliation.kol_id)")
    found = conn.execute(f"SELECT external_id FROM {CONTACTS_TABLE} WHERE crm_id = ? AND org = ?", [crm_id, org]).fetchall()
    if not found:
        raise ReviewError(f"contact {crm_id} is not among the CRM contacts of the last reconciliation: check the id "
                          "(kol_crm_reconciliation.crm_id) or run `commops reconcile` first")
    return found[0][0]


def pair_score(conn: duckdb.DuckDBPyConnection, kol_id: str, crm_id: str, org: str = DEFAULT_ORG) -> float | None:
    """The probable-match score the pair has in the organization's latest result (its row, or the KOL's candidates)."""
    row = conn.execute(f"""
SELECT coalesce(max(match_score) FILTER (WHERE crm_id = ?),
                max(list_filter(from_json(candidates, '[{{"crm_id":"VARCHAR","score":"DOUBLE"}}]'),
                                lambda c: c.crm_id = ?)[1].score))
FROM {RESULT_TABLE} WHERE org = ? AND kol_id = ?""", [crm_id, crm_id, org, kol_id]).fetchall()
    return row[0][0] if row else None


def audit_row(action: str, mode: str, kol_id: str, crm_id: str, old: str | None = None, new: str | None = None,
              error: str | None = None, run_id: str = "", *, org: str = DEFAULT_ORG, user: str | None = None,
              score: float | None = None, crm_value_after: str | None = None) -> pa.Table:
    field = "external_id" if action == "confirm" else None
    return audit_table([{"org": org, "user": user, "run_id": run_id, "at": datetime.now(UTC), "mode": mode,
                         "action": action, "kol_id": kol_id, "crm_id": crm_id, "field": field, "old_value": old,
                         "new_value": new, "error": error, "score": score, "crm_value_after": crm_value_after}])


def confirm(crm: ContactUpdater, kol_id: str, crm_id: str, old_external_id: str | None, *, org: str = DEFAULT_ORG,
            user: str | None = None, score: float | None = None) -> pa.Table:
    """Write the KOL id to the contact's external-id field, read it back; the audit row says what Salesforce holds."""
    if old_external_id and old_external_id != kol_id:
        raise ReviewError(f"contact {crm_id} already carries the external id {old_external_id}: confirm that KOL, or "
                          "clear the field in Salesforce first")
    try:
        result = crm.update_contacts([{"crm_id": crm_id, "external_id": kol_id}])[0]
        ok, error = result.success, result.error
    except Exception as exc:  # noqa: BLE001 - the call failed as a whole: read back, audited, then reported
        ok, error = False, f"{type(exc).__name__}: {exc}"
    held, unreadable = read_back(crm, [crm_id])
    value = held_value(held[crm_id], "external_id") if crm_id in held else None
    if value == kol_id:
        mode, error = "applied", None
    elif unreadable and ok:
        mode, error = "unverified", f"not read back: {unreadable}"
    elif not ok:
        mode, error = "failed", f"rejected by Salesforce: {error}"
    else:
        mode, error = "failed", f"not written: Salesforce holds {'∅' if value is None else repr(value)}"
    return audit_row("confirm", mode, kol_id, crm_id, old_external_id, kol_id, error, org=org, user=user, score=score,
                     crm_value_after=value)
