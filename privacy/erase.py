"""`locate` and `erase` one person across a data directory's stores (privacy/stores.py).

The request names a KOL id or an email address; the person's other ids and emails are looked up in the
warehouse's KOL tables and the lake's KOL snapshots (an email may belong to several KOLs: all are erased),
so a store that holds only the email (campaign engagement) or only the id is found too.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from privacy.object_stores import object_stores
from privacy.stores import FILE_WORKERS, Finding, Inbox, KeptFeatures, Lake, Marts, Reports, Warehouse, quiet_connect
from privacy.subject import Subject, normalize_email
from privacy.suppression import PrivacyStore, privacy_key
from resources.sql import sql_literal
from resources.warehouse import WAREHOUSE_FILE

KOL_SOURCES = (  # (table or lake resource folder, its email expression)
    ("kols", "email"),
    ("kol_details", "contact.email"),
)


def resolve(data_dir: Path, kol_id: str | None = None, email: str | None = None, org: str | None = None) -> Subject:
    """The subject with every KOL id sharing the email and every email of the ids (two rounds), in `org`
    (None: every organization)."""
    subject = Subject(kol_ids=(kol_id,) if kol_id else (), emails=(email,) if email else (), org=org)
    for _ in range(2):
        ids, emails = _lookup(data_dir, subject)
        subject = subject.with_(ids, emails)
    return subject


def _lookup(data_dir: Path, subject: Subject) -> tuple[tuple[str, ...], tuple[str, ...]]:
    ids: set[str] = set()
    emails: set[str] = set()
    where = " OR ".join([f"id IN ({', '.join(map(sql_literal, subject.kol_ids))})"] * bool(subject.kol_ids)
                        + [f"lower(trim({{email}})) IN ({', '.join(map(sql_literal, subject.emails))})"] * bool(subject.emails))
    if not where:
        return (), ()
    where = f"({where})" + (f" AND org = {sql_literal(subject.org)}" if subject.org else "")
    relations = []
    warehouse = data_dir / WAREHOUSE_FILE
    lake_files = Lake(data_dir).files(subject.org)
    with closing(quiet_connect(memory_limit="512MB", threads=FILE_WORKERS)) as conn:
        if warehouse.exists():
            conn.execute(f"ATTACH {sql_literal(str(warehouse))} AS w (READ_ONLY)")
            present = {row[0] for row in conn.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'w'").fetchall()}
            relations += [(f"w.main.{table}", expr) for table, expr in KOL_SOURCES if table in present]
        for table, expr in KOL_SOURCES:
            files = [str(p) for p in lake_files if f"/{table}/snapshot_date=" in str(p) and "/changed/" not in str(p)]
            if files:
                relations.append((f"read_parquet([{', '.join(map(sql_literal, files))}], union_by_name = true, hive_partitioning = true)", expr))
        for relation, expr in relations:
            for found_id, found_email in conn.execute(
                    f"SELECT DISTINCT id, {expr} FROM {relation} WHERE {where.format(email=expr)}").fetchall():
                ids.add(found_id)
                if found_email:
                    emails.add(normalize_email(found_email))
    return tuple(ids), tuple(emails)


@dataclass
class Outcome:
    subject: Subject
    findings: list[Finding] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.findings)

    def per_store(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for finding in self.findings:
            totals[finding.store] += finding.rows
        return dict(totals)


def all_stores(data_dir: Path, log: Any = None) -> list:
    """In erasure order: the files that hold the person beside an id first, then the warehouse (the person's ids
    and emails are looked up there and in the lake), then the marts, built from both: a build that starts before
    the marts are erased is waited for, and one that starts after finds the person nowhere.
    The lake on object storage and the Iceberg tables (privacy/object_stores.py) are among them when set.
    `log` (an object with `info`) is told when a store waits for a lock that a sync or a marts build holds."""
    return [Inbox(data_dir), Reports(data_dir), KeptFeatures(data_dir, log), Lake(data_dir), *object_stores(data_dir),
            Warehouse(data_dir, log), Marts(data_dir, log)]


def locate(data_dir: Path, subject: Subject) -> Outcome:
    return Outcome(subject, [finding for store in all_stores(data_dir) for finding in store.locate(subject)])


def erase(data_dir: Path, subject: Subject, *, on_store=None, log: Any = None) -> Outcome:
    """Suppress the subject first (a sync or event arriving meanwhile is dropped), then clean every store;
    the erasure log records the stores and row counts as each is done (a run killed halfway stays
    `erase-interrupted` with what it did). Run again after a crash, it finishes what was left. A store whose
    lock a sync or a marts build holds waits for it, and says so to `log` (an object with `info`)."""
    key = privacy_key()
    store = PrivacyStore(data_dir)
    store.suppress(key, subject)
    entry = store.log(INTERRUPTED, store.subject_hash(key, subject), {}, 0)
    outcome = Outcome(subject)
    for kind in all_stores(data_dir, log):
        if on_store is not None:
            on_store(kind.name)
        outcome.findings += kind.erase(subject)
        store.update(entry, INTERRUPTED, outcome.per_store(), outcome.rows)
    store.update(entry, "erase", outcome.per_store(), outcome.rows)
    return outcome


INTERRUPTED = "erase-interrupted"  # the log's action until the run has cleaned every store



