"""Every store of a data directory that can hold a physician's personal data, each able to say how many
of its rows hold a person (`locate`) and to remove them (`erase`), crash-safe and idempotent:

- lake snapshot files and their changed-rows side files (Parquet): only the files that hold the person
  are rewritten, row group by row group with the file's own schema, beside the file, then renamed over it;
- the marts (DuckDB, built by dbt): rebuilt the same way as the warehouse, under the marts lock;
- the warehouse (DuckDB): rebuilt into a new file without the person's rows (the write-back audit keeps
  its rows, their personal values tombstoned), then renamed over it, under the writer lock (a sync writing is
  waited for): no free block of the new file ever held the person; analytics.duckdb is then republished from it;
- the webhook inbox (the SQLite file, or Postgres with COMMOPS_INBOX_URL): the person's events deleted, then
  VACUUM (and on SQLite a TRUNCATE checkpoint of the write-ahead log), on every run (a run killed between the
  delete and the VACUUM leaves nothing behind);
- reports (CSV and HTML under reports/): the person's rows removed, the file rewritten beside and renamed.

Reading is DuckDB over the files (never a dataset in Python objects); only row numbers come back.
"""

from __future__ import annotations

import csv
import html
import os
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from crm.kept_features import kept_files
from privacy.subject import Subject
from resources.files import fsync_dir
from resources.lake import LAKE_DIR, ORG_PARTITION, STAGING_DIR
from resources.sql import sql_literal
from resources.marts import MartsResource
from resources.warehouse import WarehouseResource
from resources.inbox import Inbox as InboxStore, describe_location, inbox_location
from resources.inbox.stores import POSTGRES_TABLE, is_postgres_url

REPORTS_DIR = "reports"
AUDIT_TABLE = "crm_writeback_audit"
TOMBSTONE = "[erased]"
# The audit's columns that identify the person or hold their values; the rest (what was done, when, by whom,
# on which CRM contact) stays: the audit records what truly happened.
AUDIT_PERSONAL = ("kol_id", "old_value", "new_value", "crm_value_after", "error", "kol_name", "institution")
AUDIT_ERASED_AT = "erased_at"  # set where the table has it


@dataclass(frozen=True)
class Finding:
    """`rows` rows of the person in `store` (a kind: lake, warehouse, ...) at `location` (a file or table)."""

    store: str
    location: str
    rows: int


def quiet_connect(database: str = ":memory:", read_only: bool = False, **config: object) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that draws no progress bar: DuckDB draws one on stdout for a query over 2 s,
    even into a pipe or a cron log (the setting is per connection, not a connect option)."""
    conn = duckdb.connect(database, read_only=read_only, config=config)
    conn.execute("SET enable_progress_bar = false")
    return conn


# Lake files scanned and rewritten side by side: DuckDB and pyarrow work outside the GIL, one file per core.
FILE_WORKERS = min(4, os.cpu_count() or 1)


def scan_connect() -> duckdb.DuckDBPyConnection:
    """A small connection for scanning one file (FILE_WORKERS of them at a time)."""
    return quiet_connect(memory_limit="256MB", threads=1)


class Lake:
    """The snapshot files (`data.parquet`) and changed-rows side files under <data_dir>/lake."""

    name = "lake"

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / LAKE_DIR

    def files(self, org: str | None = None) -> list[Path]:
        """Every Parquet file of the lake; given `org`, that organization's and the deployment's own (no org level)."""
        if not self.root.is_dir():
            return []
        files = (p for p in self.root.rglob("*.parquet") if STAGING_DIR not in p.relative_to(self.root).parts)
        if org is not None:
            files = (p for p in files if org_of_path(p.relative_to(self.root)) in (None, org))
        return sorted(files)

    def locate(self, subject: Subject) -> list[Finding]:
        return self._each_file(subject, rewrite=False)

    def erase(self, subject: Subject) -> list[Finding]:
        """One scan per file (the row numbers of the person's rows), a rewrite of the files that have any."""
        return self._each_file(subject, rewrite=True)

    def _each_file(self, subject: Subject, rewrite: bool) -> list[Finding]:
        """Each file on its own (scanned, and rewritten if it holds the person), FILE_WORKERS at a time."""
        with ThreadPoolExecutor(FILE_WORKERS, thread_name_prefix="erase-file") as pool:
            found = list(pool.map(lambda path: _file_rows(path, subject, rewrite), self.files(subject.org)))
        return [Finding(self.name, str(path), rows) for path, rows in found if rows]


def _file_rows(path: Path, subject: Subject, rewrite: bool) -> tuple[Path, int]:
    """The number of the person's rows in one Parquet file, the file rewritten without them if `rewrite`."""
    drop = parquet_rows_of(path, subject)
    if drop and rewrite:
        _rewrite_parquet_without(path, drop)
    return path, len(drop)


def parquet_rows_of(path: Path, subject: Subject) -> set[int]:
    """The row numbers of the person's rows in a local Parquet file."""
    with closing(scan_connect()) as conn:
        relation = f"read_parquet({sql_literal(str(path))})"
        hit = subject_predicate(conn, relation, subject)
        return {row[0] for row in conn.execute(
            f"SELECT file_row_number FROM read_parquet({sql_literal(str(path))}, file_row_number = true) t "
            f"WHERE {hit}").fetchall()}


def subject_predicate(conn: duckdb.DuckDBPyConnection, relation: str, subject: Subject, org_column: bool = False) -> str:
    """The subject's condition over the text and nested columns of `relation` (aliased t)."""
    columns = [(row[0], row[1]) for row in conn.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()]
    return subject.duckdb_predicate("t", org_column=org_column, columns=columns)


def org_of_path(relative: Path) -> str | None:
    """The organization a lake path (relative to its root) belongs to; None for the deployment's own files."""
    first = relative.parts[0]
    return first.split("=", 1)[1] if first.startswith(f"{ORG_PARTITION}=") else None


def _rewrite_parquet_without(path: Path, drop: set[int]) -> None:
    """The file without the rows numbered in `drop`, written beside it and renamed over it."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.erasing")
    try:
        write_parquet_without(path, temp, drop)
        replace_durably(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_parquet_without(path: Path, target: Path, drop: set[int]) -> int:
    """`path` copied to `target` without the rows numbered in `drop`: same schema (with its metadata), row
    groups and compression. The rows kept."""
    source = pq.ParquetFile(path)
    compression = source.metadata.row_group(0).column(0).compression.lower() if source.metadata.num_row_groups else "zstd"
    kept = 0
    with pq.ParquetWriter(target, source.schema_arrow, compression=compression) as writer:
        start = 0
        for group in range(source.metadata.num_row_groups):
            table = source.read_row_group(group)
            keep = [i for i in range(table.num_rows) if start + i not in drop]
            start += table.num_rows
            kept += len(keep)
            if keep:
                writer.write_table(table.take(pa.array(keep, pa.int64())) if len(keep) < table.num_rows else table)
    return kept


class Warehouse:
    """Every table of warehouse.duckdb (children, CRM tables, webhook tables included), and its published copy."""

    name = "warehouse"

    def __init__(self, data_dir: Path, log: Any = None) -> None:
        self.data_dir = data_dir
        self.resource = WarehouseResource(data_dir=str(data_dir))
        self.log = log

    def locate(self, subject: Subject) -> list[Finding]:
        found = []
        for store, path in ((self.name, self.resource.path), ("analytics", self.resource.analytics_path)):
            if path.exists():
                with closing(quiet_connect(str(path), read_only=True)) as conn:
                    found += [Finding(store, f"{path.name}:{table}", rows)
                              for table, rows in _table_counts(conn, subject)]
        return found

    def erase(self, subject: Subject) -> list[Finding]:
        found = self.locate(subject)
        if any(f.store == self.name for f in found):
            with self.resource.locked(self.log):  # as a sync's writer (one writing is waited for)
                self._rebuild_without(subject)
        if found:  # a run killed after the rebuild finds the person in the published copy only
            self.resource.publish_analytics()
        return found

    def _rebuild_without(self, subject: Subject) -> None:
        _rebuild_duckdb_without(self.resource.path, subject)


class Marts:
    """The analysts' marts (marts.duckdb, built by dbt from the warehouse and the lake's KOL snapshots):
    rebuilt without the person under the marts lock, which a build holds from its start to its swap; a build's
    leftover copies (of the marts and of the warehouse) are deleted. Erased after the warehouse, so that no build
    starting later reads the person again, then republished into analytics.duckdb."""

    name = "marts"

    def __init__(self, data_dir: Path, log: Any = None) -> None:
        self.marts = MartsResource(data_dir=str(data_dir))
        self.warehouse = WarehouseResource(data_dir=str(data_dir))
        self.log = log

    def locate(self, subject: Subject) -> list[Finding]:
        path = self.marts.path
        if not path.exists():
            return []
        with closing(quiet_connect(str(path), read_only=True)) as conn:
            return [Finding(self.name, f"{path.name}:{table}", rows) for table, rows in _table_counts(conn, subject)]

    def erase(self, subject: Subject) -> list[Finding]:
        with self.marts.changing(self.log):  # a build running is waited for (seconds), and none starts meanwhile
            self.marts.discard()  # copies left by a killed build hold last night's rows
            found = self.locate(subject)
            if found:
                _rebuild_duckdb_without(self.marts.path, subject)
        if found:
            self.warehouse.publish_analytics()
        return found


def _rebuild_duckdb_without(path: Path, subject: Subject) -> None:
    """A DuckDB file rebuilt into a new file without the subject's rows (schema, views and comments kept;
    the write-back audit keeps its rows, tombstoned), then renamed over it: no free block of the new file
    ever held the person."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.erasing")
    try:
        with closing(scan_connect()) as conn:
            conn.execute(f"ATTACH {sql_literal(str(path))} AS old (READ_ONLY)")
            conn.execute(f"ATTACH {sql_literal(str(temp))} AS new")
            conn.execute("COPY FROM DATABASE old TO new (SCHEMA)")
            for table, columns in _tables(conn, "old"):
                hit = subject_predicate(conn, f"old.main.{_quote(table)}", subject, org_column="org" in columns)
                conn.execute(f"INSERT INTO new.main.{_quote(table)} SELECT {_kept(table, columns, hit)} "
                             f"FROM old.main.{_quote(table)} t" + ("" if table == AUDIT_TABLE else f" WHERE NOT {hit}"))
            conn.execute("DETACH old")
            conn.execute("CHECKPOINT new")
            conn.execute("DETACH new")
        replace_durably(temp, path)
    finally:
        temp.unlink(missing_ok=True)
        Path(f"{temp}.wal").unlink(missing_ok=True)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(conn: duckdb.DuckDBPyConnection, database: str) -> list[tuple[str, list[str]]]:
    tables = [row[0] for row in conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' ORDER BY 1",
        [database]).fetchall()]
    return [(table, [row[0] for row in conn.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main' AND table_name = ? "
        "ORDER BY column_index", [database, table]).fetchall()]) for table in tables]


def _kept(table: str, columns: list[str], hit: str) -> str:
    """The select list copying a table: the audit's personal values tombstoned on the person's rows (`hit`)."""
    if table != AUDIT_TABLE:
        return "*"
    out = []
    for column in columns:
        if column in AUDIT_PERSONAL:
            out.append(f"CASE WHEN {hit} THEN {sql_literal(TOMBSTONE)} ELSE t.{_quote(column)} END")
        elif column == AUDIT_ERASED_AT:
            out.append(f"CASE WHEN {hit} THEN now() ELSE t.{_quote(column)} END")
        else:
            out.append(f"t.{_quote(column)}")
    return ", ".join(out)


def _table_counts(conn: duckdb.DuckDBPyConnection, subject: Subject) -> Iterator[tuple[str, int]]:
    database = conn.execute("SELECT current_database()").fetchone()[0]
    for table, columns in _tables(conn, database):
        hit = subject_predicate(conn, f"main.{_quote(table)}", subject, org_column="org" in columns)
        rows = conn.execute(f"SELECT count(*) FROM main.{_quote(table)} t WHERE {hit}").fetchone()[0]
        if rows:
            yield table, int(rows)


class KeptFeatures:
    """The CRM contact features kept between reconciliations (crm/kept_features.py, one DuckDB file per
    organization): derived from the CRM extract, so a file holding the person is deleted whole, under the
    warehouse's writer lock (no reconciliation has it open then); the next reconciliation computes it again."""

    name = "crm-kept"

    def __init__(self, data_dir: Path, log: Any = None) -> None:
        self.data_dir = data_dir
        self.warehouse = WarehouseResource(data_dir=str(data_dir))
        self.log = log

    def locate(self, subject: Subject) -> list[Finding]:
        found = []
        for path in kept_files(self.data_dir):
            if subject.org is None or path.stem == subject.org:
                with closing(quiet_connect(str(path), read_only=True)) as conn:
                    rows = sum(rows for _, rows in _table_counts(conn, subject))
                if rows:
                    found.append(Finding(self.name, str(path), rows))
        return found

    def erase(self, subject: Subject) -> list[Finding]:
        found = self.locate(subject)
        if found:
            with self.warehouse.locked(self.log):
                for finding in found:
                    path = Path(finding.location)
                    path.unlink(missing_ok=True)
                    path.with_name(path.name + ".wal").unlink(missing_ok=True)
        return found


class Inbox:
    """The webhook inbox where the receiver and the sync find it (resources/inbox `inbox_location`: the
    Postgres of COMMOPS_INBOX_URL, else the data directory's SQLite file): each event's payload as received."""

    name = "inbox"

    def __init__(self, data_dir: Path) -> None:
        self.location = inbox_location(data_dir)

    def _open(self) -> InboxStore | None:
        """The inbox, or None for a SQLite file that does not exist (nothing to find, nothing created)."""
        if isinstance(self.location, Path) and not self.location.exists():
            return None
        return InboxStore(self.location)

    def _finding(self, rows: int) -> list[Finding]:
        where = describe_location(self.location)
        table = POSTGRES_TABLE if is_postgres_url(self.location) else "events"
        return [Finding(self.name, f"{where}:{table}", rows)] if rows else []

    def locate(self, subject: Subject) -> list[Finding]:
        inbox = self._open()
        if inbox is None:
            return []
        with inbox:
            return self._finding(inbox.count_matching(subject.pattern()))

    def erase(self, subject: Subject) -> list[Finding]:
        inbox = self._open()
        if inbox is None:
            return []
        with inbox:
            return self._finding(inbox.erase_matching(subject.pattern()))


class Reports:
    """CSV and HTML reports under <data_dir>/reports (reconciliation reports, merge and plan CSVs)."""

    name = "reports"

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / REPORTS_DIR

    def files(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.rglob("*") if p.suffix.lower() in (".csv", ".html") and p.is_file())

    def locate(self, subject: Subject) -> list[Finding]:
        found = []
        for path in self.files():
            rows = sum(1 for _ in (_csv_hits if path.suffix.lower() == ".csv" else _html_hits)(path, subject))
            if rows:
                found.append(Finding(self.name, str(path), rows))
        return found

    def erase(self, subject: Subject) -> list[Finding]:
        found = self.locate(subject)
        for finding in found:
            path = Path(finding.location)
            (_rewrite_csv if path.suffix.lower() == ".csv" else _rewrite_html)(path, subject)
        return found


def _csv_hits(path: Path, subject: Subject) -> Iterator[int]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        for number, row in enumerate(csv.reader(handle)):
            if subject.matches("\x1f".join(row)):
                yield number


def _rewrite_csv(path: Path, subject: Subject) -> None:
    bom = path.read_bytes()[:3] == b"\xef\xbb\xbf"
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.erasing")
    with path.open(encoding="utf-8-sig", newline="") as source, \
            temp.open("w", encoding="utf-8-sig" if bom else "utf-8", newline="") as out:
        sample = source.readline()
        terminator = "\r\n" if sample.endswith("\r\n") else "\n"
        source.seek(0)
        writer = csv.writer(out, lineterminator=terminator)
        for row in csv.reader(source):
            if not subject.matches("\x1f".join(row)):
                writer.writerow(row)
    replace_durably(temp, path)


_TR = re.compile(r"<(/?)tr\b[^>]*>", re.IGNORECASE)


def _outer_rows(text: str) -> list[tuple[int, int]]:
    """The spans of the outermost table rows (a row may hold a table of its own: the differences)."""
    spans, depth, start = [], 0, 0
    for tag in _TR.finditer(text):
        if not tag.group(1):
            if depth == 0:
                start = tag.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                spans.append((start, tag.end()))
    return spans


def _html_hits(path: Path, subject: Subject) -> Iterator[int]:
    text = path.read_text(encoding="utf-8")
    for number, (start, end) in enumerate(_outer_rows(text)):
        if subject.matches(html.unescape(text[start:end])):
            yield number


def _rewrite_html(path: Path, subject: Subject) -> None:
    text = path.read_text(encoding="utf-8")
    kept, at = [], 0
    for start, end in _outer_rows(text):
        if subject.matches(html.unescape(text[start:end])):
            kept.append(text[at:start])
            at = end
    kept.append(text[at:])
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.erasing")
    temp.write_text("".join(kept), encoding="utf-8")
    replace_durably(temp, path)


def replace_durably(temp: Path, path: Path) -> None:
    """`temp` renamed over `path`, both synced to disk first and after."""
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)
