"""Retention: nothing personal kept longer than COMMOPS_RETENTION_DAYS (unset: everything is kept).

What is older than the setting goes, never below what other features need:
- lake snapshot folders (and their changed-rows side files) dated before the cutoff, except each
  resource's newest MIN_SNAPSHOTS_KEPT dates (the nights the history views and the volume comparison read;
  the newest is also what the next night's changed-rows file is computed against); the same for the lake
  on S3 (COMMOPS_LAKE_URL), each snapshot's manifest deleted before its files;
- applied webhook events of the inbox received before the cutoff (pending and quarantined ones stay), in
  the SQLite file or the Postgres of COMMOPS_INBOX_URL; then VACUUM (on SQLite with a TRUNCATE checkpoint,
  so their bytes are gone);
- reports (CSV, HTML), reconciliation_runs rows and the write-back audit's dry-run rows (each night's plan, old
  and new values included) older than the cutoff, but never younger than the write-back's undo window
  (COMMOPS_UNDO_WINDOW_DAYS, default 30): what an admin may still undo keeps the report it was decided from.
  The audit's other rows stay: they record what was written to the CRM, applied, failed or decided;
- the marts' kol_history rows that closed before the cutoff (a KOL's tier or institution of long ago);
  its open rows stay, whenever they opened: they are today's state;
- the Iceberg tables' snapshots taken before the cutoff (never a table's current one), with the files only
  they referenced (privacy/object_stores.py).
"""

from __future__ import annotations

import os
import shutil
from contextlib import closing
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any


from commops_spec.timestamps import format_timestamp
from crm.tables import AUDIT_TABLE, RUNS_TABLE
from privacy.object_stores import iceberg_tables, s3_lake
from privacy.stores import REPORTS_DIR, quiet_connect
from resources.lake import LAKE_DIR, STAGING_DIR
from resources.marts import MartsResource
from resources.sql import sql_literal
from resources.warehouse import WAREHOUSE_FILE, WarehouseResource
from resources.inbox import Inbox, inbox_location

RETENTION_DAYS_ENV = "COMMOPS_RETENTION_DAYS"
UNDO_WINDOW_ENV = "COMMOPS_UNDO_WINDOW_DAYS"
DEFAULT_UNDO_WINDOW_DAYS = 30
MIN_SNAPSHOTS_KEPT = 8  # a week's comparison and the night before it
HISTORY_TABLE = "kol_history"


class RetentionSettingError(ValueError):
    """A retention setting is not a whole number of days; the message names the variable."""


def _days(name: str, default: int | None) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise RetentionSettingError(f"{name}={value!r} is not a whole number of days (1 or more); unset it to keep everything"
                                    if name == RETENTION_DAYS_ENV else f"{name}={value!r} is not a whole number of days")
    return int(value)


def retention_days() -> int | None:
    return _days(RETENTION_DAYS_ENV, None)


def undo_window_days() -> int:
    return _days(UNDO_WINDOW_ENV, DEFAULT_UNDO_WINDOW_DAYS) or DEFAULT_UNDO_WINDOW_DAYS


@dataclass
class Removed:
    """What one retention pass removed (counts and dates only: no personal data)."""

    days: int | None
    cutoff: str | None = None
    reports_cutoff: str | None = None
    snapshots: list[str] = field(default_factory=list)  # lake folders, relative to the lake (on S3: their URLs)
    inbox_events: int = 0
    reports: list[str] = field(default_factory=list)  # relative to reports/
    reconciliation_runs: int = 0
    dry_run_audit_rows: int = 0
    kol_history_rows: int = 0
    iceberg_snapshots: int = 0

    def as_metadata(self) -> dict[str, object]:
        return {
            "retention_days": self.days if self.days is not None else "unset (everything kept)",
            "cutoff": self.cutoff or "none",
            "reports_cutoff": self.reports_cutoff or "none",
            "snapshots_removed": len(self.snapshots),
            "snapshot_folders_removed": ", ".join(self.snapshots[:50]) or "none",
            "inbox_events_removed": self.inbox_events,
            "reports_removed": len(self.reports),
            "reconciliation_runs_removed": self.reconciliation_runs,
            "dry_run_audit_rows_removed": self.dry_run_audit_rows,
            "kol_history_rows_removed": self.kol_history_rows,
            "iceberg_snapshots_expired": self.iceberg_snapshots,
        }


def apply_retention(data_dir: Path, today: date, days: int | None = None, undo_days: int | None = None,
                    log: Any = None) -> Removed:
    """Remove what is older than `days` (default: COMMOPS_RETENTION_DAYS; None keeps everything). A sync writing
    the warehouse, or a marts build, is waited for, and `log` (an object with `info`) is told."""
    days = retention_days() if days is None else days
    removed = Removed(days)
    if days is None:
        return removed
    cutoff = today - timedelta(days=days)
    reports_cutoff = today - timedelta(days=max(days, undo_window_days() if undo_days is None else undo_days))
    removed.cutoff, removed.reports_cutoff = cutoff.isoformat(), reports_cutoff.isoformat()
    removed.snapshots = _old_snapshots(data_dir / LAKE_DIR, cutoff)
    if (on_s3 := s3_lake(data_dir)) is not None:
        removed.snapshots += on_s3.expire(cutoff, MIN_SNAPSHOTS_KEPT)
    if (iceberg := iceberg_tables(data_dir)) is not None:
        removed.iceberg_snapshots = iceberg.expire_older_than(cutoff)
    removed.inbox_events = _old_inbox_events(data_dir, cutoff)
    removed.reports = _old_reports(data_dir / REPORTS_DIR, reports_cutoff)
    removed.reconciliation_runs, removed.dry_run_audit_rows = _old_reconciliations(data_dir, reports_cutoff, log)
    removed.kol_history_rows = _old_history(data_dir, cutoff, log)
    if removed.reconciliation_runs or removed.dry_run_audit_rows or removed.kol_history_rows:
        WarehouseResource(data_dir=str(data_dir)).publish_analytics()
    return removed


def _old_snapshots(lake: Path, cutoff: date) -> list[str]:
    removed = []
    if not lake.is_dir():
        return removed
    resources = {p.parent for p in lake.rglob("snapshot_date=*") if STAGING_DIR not in p.relative_to(lake).parts}
    for resource in sorted(resources):
        dated = sorted((p for p in resource.glob("snapshot_date=*") if p.is_dir()), key=lambda p: p.name, reverse=True)
        for folder in dated[MIN_SNAPSHOTS_KEPT:]:
            if folder.name.split("=", 1)[1] < cutoff.isoformat():
                shutil.rmtree(folder)
                removed.append(str(folder.relative_to(lake)))
    return removed


def _old_inbox_events(data_dir: Path, cutoff: date) -> int:
    """The inbox's applied events received before the cutoff, where the receiver and the sync find the inbox
    (the Postgres of COMMOPS_INBOX_URL, else the data directory's file)."""
    location = inbox_location(data_dir)
    if isinstance(location, Path) and not location.exists():
        return 0
    with Inbox(location) as inbox:
        return inbox.expire_applied(format_timestamp(datetime.combine(cutoff, time(), timezone.utc)))


def _old_reports(folder: Path, cutoff: date) -> list[str]:
    if not folder.is_dir():
        return []
    limit = datetime.combine(cutoff, time(), timezone.utc).timestamp()
    removed = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix.lower() in (".csv", ".html") and not path.name.startswith("latest") \
                and path.stat().st_mtime < limit:
            path.unlink()
            removed.append(str(path.relative_to(folder)))
    return removed


def _old_reconciliations(data_dir: Path, cutoff: date, log: Any) -> tuple[int, int]:
    """reconciliation_runs rows and the audit's dry-run rows from before the cutoff, deleted under the writer lock:
    (runs, audit rows)."""
    resource = WarehouseResource(data_dir=str(data_dir))
    if not (data_dir / WAREHOUSE_FILE).exists():
        return 0, 0
    before = f"{sql_literal(cutoff.isoformat())}::DATE"
    deletes = {RUNS_TABLE: f"DELETE FROM {RUNS_TABLE} WHERE reconciled_at < {before}",
               AUDIT_TABLE: f"DELETE FROM {AUDIT_TABLE} WHERE mode = 'dry_run' AND \"at\" < {before}"}
    counts = dict.fromkeys(deletes, 0)
    with resource.locked(log):
        with closing(quiet_connect(str(resource.path))) as conn:
            tables = {name for (name,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
            for table, delete in deletes.items():
                if table in tables:
                    counts[table] = int(conn.execute(delete).fetchone()[0])
            conn.execute("CHECKPOINT")
    return counts[RUNS_TABLE], counts[AUDIT_TABLE]


def _old_history(data_dir: Path, cutoff: date, log: Any) -> int:
    """kol_history's rows closed before the cutoff, deleted from the marts under the marts lock (no build runs
    meanwhile); its later rows never read them again (a night compares against the open rows only)."""
    marts = MartsResource(data_dir=str(data_dir))
    if not marts.path.exists():
        return 0
    with marts.changing(log):
        with closing(quiet_connect(str(marts.path))) as conn:
            if not conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [HISTORY_TABLE]).fetchone()[0]:
                return 0
            count = conn.execute(f"DELETE FROM {HISTORY_TABLE} WHERE valid_to < {sql_literal(cutoff.isoformat())}::DATE").fetchone()[0]
            conn.execute("CHECKPOINT")
    return int(count)
