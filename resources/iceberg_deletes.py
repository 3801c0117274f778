"""Merge-on-read for the Iceberg publish (resources/iceberg.py): where the rows a publish replaces are, the
Iceberg v2 position-delete files naming them, and the one snapshot that adds those with the new data files.

A replaced row is not removed by rewriting its data file (pyiceberg 0.12 deletes copy-on-write only: a
night changing 1% of rows spread evenly would rewrite every file): a position-delete file per data file
touched lists the replaced rows' positions in it, sorted. Its `file_path` bounds are that file's path, so a
reader (pyiceberg, Trino, Spark, DuckDB's iceberg extension) applies it to that file alone.

Delete files accumulate night after night; when the rows they delete would exceed COMPACT_SHARE of the
rows in the table's data files, the publish rewrites the table instead: its live rows and the winners into
new data files, every old data and delete file removed, in the same one snapshot.
"""

from __future__ import annotations

import io as bytes_io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.warehouse import ORG_COLUMN

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Transaction

# Rewrite the table (copy-on-write) when its delete files would delete more than this share of the rows in
# its data files: a reader then reads at most ~20% dead rows, and about five nights of 1-4% changes go by
# between two rewrites.
COMPACT_SHARE = 0.2
BATCH_ROWS = 50_000
# Iceberg's reserved field ids of a position-delete file's columns (the spec's "Position Delete Files").
FILE_PATH_ID, POS_ID = 2147483546, 2147483545
POSITION_DELETE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(FILE_PATH_ID)}),
    pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_ID)}),
])
_POSITIONS = pa.schema([("file", pa.int32()), ("pos", pa.int64())])


@dataclass(frozen=True)
class LiveFiles:
    """The data files of a table's current snapshot, the position-delete files that apply to them, row counts."""

    tasks: list[FileScanTask]
    delete_files: list[DataFile]
    rows: int  # rows in the data files, deleted ones included
    deleted: int  # rows the delete files delete


def live_files(table: Any) -> LiveFiles:
    tasks = list(table.scan().plan_files())
    deletes = list({d.file_path: d for task in tasks for d in task.delete_files}.values())
    return LiveFiles(tasks, deletes, sum(t.file.record_count for t in tasks), sum(d.record_count for d in deletes))


def find_positions(conn: duckdb.DuckDBPyConnection, table: Any, files: LiveFiles, key: str, winners: str) -> int:
    """TEMP TABLE _positions (file, pos): the live rows of the data files (`file` indexes files.tasks) whose
    (org, key) is in the SQL `winners` (rows of org, id), those already deleted left out; their count.
    Reads the two key columns of each data file, streamed."""
    paths = {task.file.file_path: i for i, task in enumerate(files.tasks)}

    def keyed() -> Iterator[pa.RecordBatch]:
        for i, task in enumerate(files.tasks):
            start = 0
            for batch in _batches(table, task.file.file_path, [ORG_COLUMN, key]):
                yield pa.RecordBatch.from_arrays(
                    [pa.repeat(pa.scalar(i, pa.int32()), batch.num_rows),
                     pa.array(np.arange(start, start + batch.num_rows)), batch.column(0).cast(pa.string()),
                     batch.column(1).cast(key_schema.field("id").type)],
                    schema=key_schema,
                )
                start += batch.num_rows

    def deleted() -> Iterator[pa.RecordBatch]:
        for delete_file in files.delete_files:
            for batch in _batches(table, delete_file.file_path, ["file_path", "pos"]):
                unique = batch.column(0).unique()  # one data file's path per delete file we write
                index = pa.array([paths.get(p) for p in unique.to_pylist()], pa.int32())
                yield pa.RecordBatch.from_arrays([index.take(pc.index_in(batch.column(0), unique)), batch.column(1)], schema=_POSITIONS)

    key_schema = pa.schema([*_POSITIONS, ("org", pa.string()), ("id", _arrow_type(table, key))])
    conn.register("_keyed", pa.RecordBatchReader.from_batches(key_schema, keyed()))
    conn.register("_deleted", pa.RecordBatchReader.from_batches(_POSITIONS, deleted()))
    try:
        conn.execute(
            "CREATE OR REPLACE TEMP TABLE _positions AS SELECT k.file, k.pos FROM _keyed k "
            f"SEMI JOIN ({winners}) w ON w.org = k.org AND w.id = k.id "
            "ANTI JOIN _deleted d ON d.file = k.file AND d.pos = k.pos"
        )
    finally:
        conn.unregister("_keyed")
        conn.unregister("_deleted")
    return conn.execute("SELECT count(*) FROM _positions").fetchall()[0][0]


def write_delete_files(conn: duckdb.DuckDBPyConnection, table: Any, files: LiveFiles) -> list[DataFile]:
    """One position-delete file per data file holding rows of _positions, sorted by position."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    written, prefix = [], uuid.uuid4()
    for (index,) in conn.execute("SELECT DISTINCT file FROM _positions ORDER BY file").fetchall():
        path = files.tasks[index].file.file_path
        pos = conn.sql("SELECT pos FROM _positions WHERE file = $1 ORDER BY pos", params=[index]).to_arrow_table().column(0)
        buffer = bytes_io.BytesIO()
        pq.write_table(pa.table([pa.repeat(pa.scalar(path), len(pos)), pos], schema=POSITION_DELETE_SCHEMA), buffer)
        location = table.location_provider().new_data_location(f"{prefix}-{index:05d}-deletes.parquet")
        with table.io.new_output(location).create(overwrite=True) as out:
            out.write(buffer.getvalue())
        bound = path.encode()
        written.append(DataFile.from_args(
            content=DataFileContent.POSITION_DELETES, file_path=location, file_format=FileFormat.PARQUET,
            partition=Record(), record_count=len(pos), file_size_in_bytes=buffer.tell(),
            lower_bounds={FILE_PATH_ID: bound, POS_ID: pos[0].as_py().to_bytes(8, "little", signed=True)},
            upper_bounds={FILE_PATH_ID: bound, POS_ID: pos[-1].as_py().to_bytes(8, "little", signed=True)},
            sort_order_id=None, spec_id=table.metadata.default_spec_id, equality_ids=None, key_metadata=None,
        ))
    return written


def data_files(transaction: Transaction, rows: pa.RecordBatchReader) -> list[DataFile]:
    """`rows` written as data files of the table (streamed): pyiceberg's own writer and schema check, as its
    `append` uses them (module-private in pyiceberg 0.12.0, the version pyproject pins)."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, _dataframe_to_data_files

    metadata = transaction.table_metadata
    _check_pyarrow_schema_compatible(metadata.schema(), provided_schema=rows.schema, format_version=metadata.format_version)
    return list(_dataframe_to_data_files(table_metadata=metadata, df=rows, io=transaction._table.io))


def commit_files(transaction: Transaction, added: list[DataFile], *, rewrite: bool) -> None:
    """One snapshot of `transaction` adding the data and position-delete files `added`; it keeps every file
    of the current snapshot, or with `rewrite` none of them (recorded as deleted).

    pyiceberg 0.12.0 has no public row-level delta (data and delete files in one snapshot) nor a writer of
    delete manifests: this subclasses its snapshot producer and manifest writer (checked against 0.12.0,
    the version pyproject pins). The transaction's commit still asserts the table is at the snapshot it
    was loaded at, so a concurrent writer's commit makes this one fail (CommitFailedException)."""
    from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestWriterV2
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    class RowDelta(_FastAppendFiles):
        def _manifests(self) -> list:
            spec = self._transaction.table_metadata.spec()
            manifests, live = [], self._live_entries() if rewrite else []
            self._deleted_data_files = {e.data_file for e in live}  # for the snapshot's summary
            for writer_class, content in ((ManifestWriterV2, DataFileContent.DATA),
                                          (DeleteManifestWriter, DataFileContent.POSITION_DELETES)):
                # Removed files in manifests of their own: the next snapshot leaves those out (a fast append
                # keeps manifests with added or existing files only), with the column bounds they record.
                for entries, add in (([f for f in added if f.content == content], True),
                                     ([e for e in live if e.data_file.content == content], False)):
                    if not entries:
                        continue
                    with writer_class(spec, self.schema(), self.new_manifest_output(), self._snapshot_id,
                                      self._compression) as writer:
                        for entry in entries:
                            if add:
                                writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                                   snapshot_id=self._snapshot_id, data_file=entry))
                            else:
                                writer.delete(entry)
                    manifests.append(writer.to_manifest_file())
            return manifests + ([] if rewrite else self._existing_manifests())

        def _live_entries(self) -> list:
            snapshot = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
            return [e for m in snapshot.manifests(self._io) for e in m.fetch_manifest_entry(self._io, discard_deleted=True)]

    producer = RowDelta(Operation.OVERWRITE if rewrite or any(
        f.content != DataFileContent.DATA for f in added) else Operation.APPEND, transaction, transaction._table.io)
    producer._added_data_files = list(added)  # the summary counts each file by its content
    with producer:
        pass


def rewrite_without_deletes(table: Any, paths: set[str]) -> bool:
    """When position-delete files apply to any of the data files `paths` of the current snapshot, the table
    rewritten (its live rows into new data files, every old file removed), so no live file still holds a
    deleted row (an erasure needs it: pyiceberg's copy-on-write delete rewrites only files whose live rows
    match). Whether it was."""
    if not any(task.delete_files for task in live_files(table).tasks if task.file.file_path in paths):
        return False
    with table.transaction() as transaction:
        commit_files(transaction, data_files(transaction, table.scan().to_arrow_batch_reader()), rewrite=True)
    return True


def _batches(table: Any, path: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    with table.io.new_input(path).open() as stream:
        yield from pq.ParquetFile(stream).iter_batches(BATCH_ROWS, columns=columns)


def _arrow_type(table: Any, column: str) -> pa.DataType:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    type_ = schema_to_pyarrow(table.schema().select(column)).field(column).type
    return pa.string() if pa.types.is_large_string(type_) else type_
