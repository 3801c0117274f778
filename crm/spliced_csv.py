"""A spreadsheet CSV written again each night from the night before's file: the lines of the rows that did not
change are copied as bytes (by the kernel: os.copy_file_range), and only the new and changed rows' lines are made.

The reconciliation CSV has a line per row of the result, a million at 1M KOLs, and a night changes a few percent
of them; making every line (DuckDB sorting the wide rows, Arrow spelling each cell) cost about 2.5 s at that size.

Each file written leaves an index in the organization's kept file (crm-kept/<org>.duckdb, owner-only, read by no one
but this code, deleted by an erasure of a person it holds): per line, two hashes of the row (of every column the line
is made of, and of its ids) and the line's offset and length in bytes; and the file's name, size and modification
time, and a stamp of the code and libraries that spelled the lines. The next file is spliced from that one only when
it is there as written (an erasure rewrites it, retention removes it, an admin may save over it) and the stamp is
today's; otherwise every line is made, as without an index. Either way the bytes are the same.
"""

from __future__ import annotations

import errno
import hashlib
import inspect
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crm import spreadsheet_csv
from resources import sql
from resources.files import replacing
from resources.sql import has_table, transaction

LINES_TABLE = "report_csv_lines"
FILE_TABLE = "report_csv_file"


@dataclass(frozen=True)
class Rows:
    """What the CSV holds: `select`, the SELECT list of its columns (`header`), over the relation `source`, in the
    total order `order` (an ORDER BY list); `row_hash`, SQL hashing every column `select` reads, and `id_hash`,
    SQL hashing the row's ids."""

    source: str
    select: str
    order: str
    row_hash: str
    id_hash: str
    header: Sequence[str]

    def hashed(self) -> str:
        """A WITH clause naming `r` the rows of `source` with their hashes, `_h` and `_i`."""
        return f"WITH r AS (SELECT *, {self.row_hash} AS _h, {self.id_hash} AS _i FROM {self.source})"

    def stamp(self) -> str:
        """What spelled the lines: this query, the line-making code, and the libraries' versions."""
        code = inspect.getsource(spreadsheet_csv) + Path(__file__).read_text(encoding="utf-8")
        parts = [self.source, self.select, self.order, self.row_hash, self.id_hash, *self.header, code,
                 version("duckdb"), version("pyarrow")]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Written:
    rows: int
    copied: int  # lines copied from the night before's file


def write(conn: duckdb.DuckDBPyConnection, rows: Rows, path: Path, kept: str | None = None) -> Written:
    """`rows` as a spreadsheet CSV at `path` (spreadsheet_csv's form), spliced from the file the index in the kept
    database `kept` names when it is there as written; the index then names this file. Without `kept`, every line
    is made and no index kept."""
    header = spreadsheet_csv.header_line(rows.header)
    previous = _previous(conn, kept, rows, path) if kept else None
    hashes: list[np.ndarray] = []  # (rows, 2): each line's row hash and id hash
    lengths: list[np.ndarray] = []
    copied = 0
    with sql.cursor(conn) as cursor, replacing(path) as temp, temp.open("wb", buffering=0) as out:
        _write_all(out, header)
        if previous is None:
            for batch in cursor.sql(f"{rows.hashed()} SELECT _h, _i, {rows.select} FROM r ORDER BY {rows.order}"
                                    ).to_arrow_reader(spreadsheet_csv.BATCH_ROWS):
                hashes.append(_hashes(batch))
                lengths.append(_write_lines(out, batch.select(range(2, batch.num_columns))))
        else:
            with open(previous, "rb", buffering=0) as source:
                for batch, length, from_old in _splice(conn, cursor, rows, kept, out, source.fileno()):
                    hashes.append(batch)
                    lengths.append(length)
                    copied += from_old
    if kept:
        _record(conn, kept, rows, path, len(header), hashes, lengths)
    return Written(sum(len(h) for h in hashes), copied)


def _splice(conn: duckdb.DuckDBPyConnection, cursor: duckdb.DuckDBPyConnection, rows: Rows, kept: str, out,
            source: int) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """Every line in order: runs of lines the old file holds in a row copied from it, the others made; yields each
    batch's hashes, line lengths and the number copied."""
    keyed = rows.hashed() + " "
    known = f"{kept}.{LINES_TABLE} o ON o.h = r._h AND o.i = r._i"
    own = sql.cursor(conn)
    try:
        fresh = own.sql(f"{keyed}SELECT {rows.select} FROM r ANTI JOIN {known} ORDER BY {rows.order}"
                         ).to_arrow_reader(spreadsheet_csv.BATCH_ROWS)
        pending = _Lines(fresh)
        for batch in cursor.sql(f"{keyed}SELECT r._h AS h, r._i AS i, o.line_offset, o.line_length FROM r LEFT JOIN {known} "
                                f"ORDER BY {rows.order}").to_arrow_reader(spreadsheet_csv.BATCH_ROWS):
            offset = batch.column(2).fill_null(-1).to_numpy()
            length = batch.column(3).fill_null(0).to_numpy().astype(np.int64)
            old = offset >= 0
            made = pending.take(int((~old).sum()))
            made_bytes, made_length = (spreadsheet_csv.values(made) if len(made) else b""), _lengths(made)
            length[~old] = made_length
            made_ends = np.cumsum(made_length)
            breaks = np.ones(len(offset), dtype=bool)
            breaks[1:] = (old[1:] != old[:-1]) | (old[1:] & (offset[1:] != offset[:-1] + length[:-1]))
            starts = np.flatnonzero(breaks)
            taken = 0  # made lines written so far
            for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(offset)]):
                if old[start]:
                    _copy(source, out.fileno(), int(offset[start]), int(offset[end - 1] + length[end - 1] - offset[start]))
                else:
                    begin = int(made_ends[taken - 1]) if taken else 0
                    taken += end - start
                    _write_all(out, made_bytes[begin:int(made_ends[taken - 1])])
            yield _hashes(batch), length, int(old.sum())
    finally:
        own.close()


class _Lines:
    """The made lines of the new and changed rows, in order, taken as the splice reaches them."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self._reader, self._lines = reader, pa.array([], pa.string())

    def take(self, count: int) -> pa.Array:
        if not count:
            return pa.array([], pa.string())
        while len(self._lines) < count:
            batch = self._reader.read_next_batch()
            if not batch.num_rows:
                continue
            self._lines = pa.concat_arrays([self._lines, spreadsheet_csv.lines(batch)])
        taken, self._lines = self._lines[:count], self._lines[count:]
        return taken


def _hashes(batch: pa.RecordBatch) -> np.ndarray:
    """The batch's first two columns (the hashes) copied out: a column DuckDB hands over keeps its whole batch alive."""
    return np.column_stack([batch.column(0).to_numpy(), batch.column(1).to_numpy()])


def _write_lines(out, batch: pa.RecordBatch) -> np.ndarray:
    """The lines of `batch` written to `out`; returns their lengths in bytes."""
    if not batch.num_rows:
        return np.zeros(0, np.int64)
    lines = spreadsheet_csv.lines(batch)
    _write_all(out, spreadsheet_csv.values(lines))
    return _lengths(lines)


def _lengths(lines: pa.Array) -> np.ndarray:
    return pc.binary_length(lines).to_numpy(zero_copy_only=False).astype(np.int64)


def _previous(conn: duckdb.DuckDBPyConnection, kept: str, rows: Rows, target: Path) -> Path | None:
    """The file the index names, beside `target`, when it is there as it was written, by today's code (and is not
    `target`, which is about to be written over)."""
    if not has_table(conn, kept, FILE_TABLE) or not has_table(conn, kept, LINES_TABLE):
        return None
    name, size, mtime_ns, stamp = conn.execute(f"SELECT name, size, mtime_ns, stamp FROM {kept}.{FILE_TABLE}").fetchall()[0]
    path = target.with_name(name)
    if path.name == target.name:
        return None
    try:
        info = path.stat()
    except OSError:
        return None
    if stamp != rows.stamp() or info.st_size != size or info.st_mtime_ns != mtime_ns:
        return None
    return path


def _record(conn: duckdb.DuckDBPyConnection, kept: str, rows: Rows, path: Path, header_bytes: int,
            hashes: list[np.ndarray], lengths: list[np.ndarray]) -> None:
    """The index of the file just written, in place of the last one's."""
    length = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    offset = header_bytes + np.cumsum(length) - length
    keys = np.concatenate(hashes) if hashes else np.zeros((0, 2), np.uint64)
    index = pa.table({"h": keys[:, 0], "i": keys[:, 1], "line_offset": offset,
                      "line_length": length.astype(np.int32)})
    info = path.stat()
    own = conn.cursor()
    try:
        own.register("_csv_index", index)
        with transaction(own):
            own.execute(f"CREATE OR REPLACE TABLE {kept}.{LINES_TABLE} AS SELECT * FROM _csv_index")
            own.execute(f"CREATE OR REPLACE TABLE {kept}.{FILE_TABLE} AS SELECT ? AS name, ?::BIGINT AS size, "
                        f"?::BIGINT AS mtime_ns, ? AS stamp", [path.name, info.st_size, info.st_mtime_ns, rows.stamp()])
    finally:
        own.close()


def _copy(source: int, target: int, offset: int, count: int) -> None:
    """`count` bytes of `source` from `offset` appended at `target`'s position, by the kernel where the file system
    lets it copy between files, else read and written."""
    while count:
        try:
            done = os.copy_file_range(source, target, count, offset)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            done = os.write(target, os.pread(source, min(count, 1 << 20), offset))
        if done == 0:
            raise OSError(f"the previous CSV ended before byte {offset + count}")
        offset, count = offset + done, count - done


def _write_all(out, data) -> None:
    view = memoryview(data)
    while view:
        view = view[out.write(view):]

