"""The contacts' extract costs what changed: Salesforce contacts whose SystemModstamp moved since the last
extract (Bulk 2.0 / REST queryAll, so deleted contacts come too, with IsDeleted) are merged into crm_contacts.

The watermark (crm_extract_state) is Salesforce's time when the last extract began, to the second
(resources/crm/salesforce.py ContactChanges): every save stamped before it was read then, and the next extract
asks for stamps at or after it, so a save later in that very second is read too and the contacts read in it are
not read again (SOQL date-times have no fraction). A
full extract runs when an organization has no state, when the source changed, and when the last full extract is
older than FULL_EVERY: Salesforce purges its recycle bin after 15 days (a contact deleted and purged in between
is seen only by a full extract), and a contact a sharing change hides moves no stamp. The reasons are in
docs/crm-decisions-salesforce.md.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from crm.tables import CONTACTS_TABLE, EXTRACT_TABLE, ensure_tables
from resources.crm.mapping import CONTACT_SCHEMA
from resources.sql import transaction

FULL_EVERY = timedelta(days=7)


def since(conn: Any, org: str, source: str, now: datetime | None = None) -> datetime | None:
    """Where organization `org`'s next extract from `source` starts, or None for a full extract."""
    ensure_tables(conn)
    if not _has_contacts(conn, org):
        return None
    row = conn.execute(f"SELECT watermark, full_extract_at FROM {EXTRACT_TABLE} WHERE org = ? AND source = ?",
                       [org, source]).fetchone()
    if row is None or row[0] is None or row[1] is None:
        return None
    watermark, full_at = row
    if (now or datetime.now(UTC)) - full_at >= FULL_EVERY:
        return None
    return watermark


def merge(conn: Any, org: str, changes: str) -> tuple[int, int]:
    """Merge `changes` (a relation of CHANGES_SCHEMA rows) into organization `org`'s rows of crm_contacts in one
    transaction: each changed contact's row replaced by its latest version, deleted ones removed. Returns
    (rows merged, contacts deleted)."""
    columns = ", ".join(f'"{name}"' for name in CONTACT_SCHEMA.names)
    latest = f"(SELECT * FROM {changes} QUALIFY row_number() OVER (PARTITION BY crm_id ORDER BY system_modstamp DESC) = 1)"
    with transaction(conn):
        conn.execute(f"CREATE OR REPLACE TEMP TABLE _crm_changes AS SELECT * FROM {latest}")
        deleted = conn.execute(f"SELECT count(*) FROM {CONTACTS_TABLE} WHERE org = ? AND crm_id IN "
                               "(SELECT crm_id FROM _crm_changes WHERE is_deleted)", [org]).fetchone()[0]
        conn.execute(f"DELETE FROM {CONTACTS_TABLE} WHERE org = ? AND crm_id IN (SELECT crm_id FROM _crm_changes)", [org])
        merged = conn.execute(f"INSERT INTO {CONTACTS_TABLE} BY NAME SELECT ? AS org, {columns}, now() AS _extracted_at "
                              "FROM _crm_changes WHERE NOT is_deleted", [org]).fetchone()[0]
        conn.execute("DROP TABLE _crm_changes")
    return int(merged), int(deleted)


def record(conn: Any, org: str, source: str, watermark: datetime | None, *, full: bool, rows: int, deleted: int = 0) -> None:
    """The state after an extract: the watermark (the previous one when nothing was read) and, after a full
    extract, its time."""
    ensure_tables(conn)
    now = datetime.now(UTC)
    previous = conn.execute(f"SELECT watermark, full_extract_at FROM {EXTRACT_TABLE} WHERE org = ? AND source = ?",
                            [org, source]).fetchone()
    if not full and previous is not None:
        watermark = max(filter(None, (watermark, previous[0])), default=None)
    full_at = now if full or previous is None else previous[1]
    with transaction(conn):
        conn.execute(f"DELETE FROM {EXTRACT_TABLE} WHERE org = ?", [org])
        conn.execute(f"INSERT INTO {EXTRACT_TABLE} (org, source, watermark, full_extract_at, extracted_at, rows_read, "
                     "rows_deleted) VALUES (?, ?, ?, ?, ?, ?, ?)", [org, source, watermark, full_at, now, rows, deleted])


def forget(conn: Any, org: str) -> None:
    """No state for `org`: its contacts came from elsewhere (a report export), so the next Salesforce extract is full."""
    ensure_tables(conn)
    conn.execute(f"DELETE FROM {EXTRACT_TABLE} WHERE org = ?", [org])


def _has_contacts(conn: Any, org: str) -> bool:
    present = conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND schema_name = current_schema()",
                           [CONTACTS_TABLE]).fetchone()[0]
    return bool(present) and conn.execute(f"SELECT count(*) > 0 FROM (SELECT 1 FROM {CONTACTS_TABLE} WHERE org = ? LIMIT 1)",
                                          [org]).fetchone()[0]
