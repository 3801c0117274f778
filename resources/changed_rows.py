"""The changed rows of a snapshot: a side file of the rows that differ from the previous snapshot's.

A nightly snapshot holds every row; after a quiet day about 1% of them differ from the night before. The
warehouse merge finds the rows it writes from narrow columns alone (ids, versions, digests), but reading
those rows whole from the snapshot decodes all of it: every row group holds a few. So while a snapshot is
written, each batch's digests are looked up among the previous snapshot's in the batch's range of the
list's sort key (it never changes for a row, and lists are paged in its order: one or two of the previous
file's row groups), and the rows whose digest is not there, new or changed, go to a side file beside it
(a digest hashes the row's id with its content: only a 64-bit collision could leave a changed row out):

    <snapshot folder>/changed/data.parquet     outside the history views' glob (snapshot_date=*/*.parquet)

Both files carry the snapshot's id in their Arrow schema metadata: the merge reads the side file only when
it names the snapshot beside it (a re-run that replaced the one but not yet the other is read without it).
The side file also names the snapshot it was compared with (`commops.previous_snapshot_id`): a re-run of a
day compares with that day's earlier file, and kol_history uses a side file only when it follows the night
before (marts/macros/kol_history_nights.sql).
The side file is a shortcut, never the truth: the merge reads from it the rows it writes that are there, and
from the snapshot those that are not (a row the table lacks, or holds otherwise than the previous snapshot
did). Where it would not pay (no previous snapshot of this schema, more than half the rows changed) none
is written.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.digest import DIGEST_COLUMN

CHANGES_DIR = "changed"
SNAPSHOT_ID = b"commops.snapshot_id"  # Arrow schema metadata key naming the snapshot a file was written as
PREVIOUS_SNAPSHOT_ID = b"commops.previous_snapshot_id"  # a side file's: the snapshot its rows were compared with
# A snapshot's, when it replaced a snapshot of the same date (a re-run of the day): the one it replaced. A reader
# that read the day before sees it was written again, side file or not.
REPLACES_SNAPSHOT_ID = b"commops.replaces_snapshot_id"


def new_snapshot_id() -> str:
    return uuid.uuid4().hex


def with_snapshot_id(schema: pa.Schema, snapshot_id: str, replaces: str | None = None) -> pa.Schema:
    ids = {SNAPSHOT_ID: snapshot_id.encode(), **({REPLACES_SNAPSHOT_ID: replaces.encode()} if replaces else {})}
    return schema.with_metadata({**(schema.metadata or {}), **ids})


def snapshot_id_of(path: Path) -> str | None:
    metadata = pq.read_schema(path).metadata or {}
    return metadata[SNAPSHOT_ID].decode() if SNAPSHOT_ID in metadata else None


def changes_path(snapshot_dir: Path, file_name: str) -> Path:
    return snapshot_dir / CHANGES_DIR / file_name


def changes_of(snapshot: Path) -> Path | None:
    """The side file of the published snapshot file `snapshot`, when there is one written with it."""
    changes = changes_path(snapshot.parent, snapshot.name)
    if not changes.exists():
        return None
    mine = snapshot_id_of(changes)
    return changes if mine is not None and mine == snapshot_id_of(snapshot) else None


class ChangedRows:
    """Writes the side file of a snapshot being written: `write` each batch (with its digests) as it goes
    into the snapshot. `abandoned` once more than half the rows compared changed: the side file is then
    deleted, and the merge reads the snapshot as it would without one."""

    def __init__(self, previous: pq.ParquetFile, path: Path, schema: pa.Schema, *, sort: str | None):
        self.path = path
        previous_id = (previous.schema_arrow.metadata or {}).get(SNAPSHOT_ID)
        self.schema = schema if previous_id is None else schema.with_metadata(
            {**(schema.metadata or {}), PREVIOUS_SNAPSHOT_ID: previous_id})
        self.rows_compared = 0
        self.rows_changed = 0
        self.abandoned = False
        self._previous = previous
        self._sort = sort if sort in schema.names else None
        self._ranges = self._group_ranges() if self._sort else None
        self._writer: pq.ParquetWriter | None = None

    @classmethod
    def against(cls, previous: Path, path: Path, schema: pa.Schema, *, sort: str | None) -> ChangedRows | None:
        """The side file at `path` of rows written with `schema`, compared with the `previous` snapshot file;
        None when that file cannot be read or has another schema (digests included): a snapshot of another
        schema hashes its rows otherwise, and every row would look changed."""
        try:
            file = pq.ParquetFile(previous)
        except (OSError, pa.ArrowInvalid):
            return None
        if not file.schema_arrow.remove_metadata().equals(schema.remove_metadata()):
            file.close()
            return None
        return cls(file, path, schema, sort=sort)

    def write(self, rows: pa.Table) -> None:
        if self.abandoned:
            return
        changed = self._changed(rows)
        self.rows_compared += rows.num_rows
        self.rows_changed += changed.num_rows
        if self.rows_changed * 2 > self.rows_compared:
            self.abandon()
            return
        if changed.num_rows:
            self._opened().write_table(changed)

    def finish(self) -> None:
        """Close the side file (an empty one when nothing changed: the merge then reads nothing whole)."""
        if not self.abandoned:
            self._opened().close()

    def abandon(self) -> None:
        self.abandoned = True
        self.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._previous.close()

    def _opened(self) -> pq.ParquetWriter:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        return self._writer

    def _changed(self, rows: pa.Table) -> pa.Table:
        """The rows whose digest the previous snapshot does not hold (where they may be), in their order."""
        groups = self._overlapping_groups(rows)
        if not groups:
            return rows
        before = self._previous.read_row_groups(groups, columns=[DIGEST_COLUMN]).column(0)
        return rows.filter(pc.invert(pc.is_in(rows.column(DIGEST_COLUMN), value_set=before.combine_chunks())))

    def _overlapping_groups(self, rows: pa.Table) -> list[int]:
        """The previous file's row groups that may hold these rows: those whose sort-key range meets the
        batch's (and any with a NULL key), or all of them without a sort key."""
        every = list(range(self._previous.num_row_groups))
        if self._ranges is None:
            return every
        low, high = (value.as_py() for value in pc.min_max(rows.column(self._sort)).values())
        if low is None:
            return every
        return [g for g, span in enumerate(self._ranges) if span is None or not (span[1] < low or span[0] > high)]

    def _group_ranges(self) -> list[tuple | None]:
        """Per row group of the previous file, the (min, max) of its sort key; None where it holds a NULL."""
        ranges = []
        for group in range(self._previous.num_row_groups):
            keys = self._previous.read_row_group(group, columns=[self._sort]).column(0)
            low, high = (value.as_py() for value in pc.min_max(keys).values())
            ranges.append(None if keys.null_count or low is None else (low, high))
        return ranges
