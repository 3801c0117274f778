"""CSV files that people open in a spreadsheet: the reconciliation CSV, the merge CSV, the rejected pairs.

A spreadsheet runs a cell that starts with =, +, -, @, a tab or a carriage return as a formula, so a
KOL named `=HYPERLINK(...)` would become a live link in a CRM admin's Excel. Every text cell that starts
with one of them is written with a leading ' (OWASP's rule against CSV injection): the spreadsheet takes
it as text, so a phone `+49 30 1234` is a phone, not a sum. A cell that starts with ' followed by one of them
gets one more ', so that `restore`, which takes the added ' off where our code reads such a file back, gives
every value back as it was. Numeric and boolean columns are left as they are. Both work on whole Arrow
columns: these files reach a million rows.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources import sql
from resources.files import replacing

BATCH_ROWS = 50_000
_FORMULA_START = r"^('*[=+\-@\t\r])"
_ADDED_QUOTE = r"^'('*[=+\-@\t\r])"
_FORMULA_FIRST = np.zeros(256, dtype=bool)  # the first bytes of the cells _FORMULA_START can match
_FORMULA_FIRST[list(b"'=+-@\t\r")] = True
_QUOTED = (b",", b'"', b"\r", b"\n")  # a cell holding one is quoted
Data = TypeVar("Data", pa.Table, pa.RecordBatch)


def neutralise(data: Data) -> Data:
    """`data` with a ' before every text cell a spreadsheet would take for a formula."""
    return _replace_in_text(data, _FORMULA_START, r"'\1")


def restore(data: Data) -> Data:
    """`data` as it was before `neutralise`: the added ' taken off again."""
    return _replace_in_text(data, _ADDED_QUOTE, r"\1")


def write(conn: duckdb.DuckDBPyConnection, query: str, header: Sequence[str], path: Path) -> int:
    """`query`'s rows, neutralised, as a CSV Excel opens cleanly (UTF-8 with BOM, CRLF), streamed in
    batches on a cursor of `conn`'s current database, replacing `path` whole when done (it may be one an admin is
    downloading). Returns the row count."""
    count = 0
    with sql.cursor(conn) as cursor, replacing(path) as temp, temp.open("wb") as out:
        out.write(header_line(header))
        for batch in cursor.sql(query).to_arrow_reader(BATCH_ROWS):
            if batch.num_rows:
                out.write(values(lines(batch)))
            count += batch.num_rows
    return count


def header_line(columns: Sequence[str]) -> bytes:
    """The file's first bytes: the BOM and the header line."""
    title = io.StringIO()
    csv.writer(title, lineterminator="\r\n").writerow(columns)
    return ("\ufeff" + title.getvalue()).encode("utf-8")


def lines(batch: pa.RecordBatch) -> pa.StringArray:
    """The CRLF-ended lines csv.writer (minimal quoting) writes for `batch`'s rows, neutralised, made column by column
    in Arrow: a value is str() of it (True, 0.95; None is empty), quoted when it holds a comma, a quote, CR or LF."""
    cells = [_cells(column) for column in batch.columns]
    joined = pc.binary_join_element_wise(*cells, ",", null_handling="replace", null_replacement="")
    return pc.binary_join_element_wise(joined, "\r\n", "")


def values(strings: pa.StringArray) -> memoryview:
    """The UTF-8 bytes of `strings`' values end to end, without a copy."""
    offsets = memoryview(strings.buffers()[1]).cast("q" if pa.types.is_large_string(strings.type) else "i")
    return memoryview(strings.buffers()[2])[offsets[strings.offset]:offsets[strings.offset + len(strings)]]


def _cells(column: pa.Array) -> pa.Array:
    type_ = column.type
    if pa.types.is_null(type_):
        return pa.nulls(len(column), pa.string())
    if pa.types.is_boolean(type_):
        return pc.if_else(column, "True", "False")
    if not _is_text(type_):  # numbers and the rest: Python's own str() of the values present
        present = pc.is_valid(column)
        texts = pa.array([str(value) for value in column.filter(present).to_pylist()], pa.string())
        return pc.replace_with_mask(pa.nulls(len(column), pa.string()), present, texts)
    text = column.cast(pa.string()) if not pa.types.is_string(type_) else column
    if _may_start_formula(text):
        text = _replaced(text, _FORMULA_START, r"'\1")
    if not _may_need_quotes(text):
        return text
    special = pc.fill_null(pc.match_substring_regex(text, '[,"\r\n]'), False)
    if not pc.any(special).as_py():
        return text
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(text.filter(special), '"', '""'), '"', "")
    return pc.replace_with_mask(text, special, quoted)


def rows(data: pa.Table | pa.RecordBatch) -> zip:
    """The rows of `data` as tuples of Python values, for csv.writer."""
    return zip(*(column.to_pylist() for column in data.columns))


def _may_start_formula(text: pa.StringArray) -> bool:
    """Whether a cell of `text` may start with a formula character or ': the first bytes of all its cells at once
    (the regex only looks at columns where one does; a null cell's bytes may say yes, never no)."""
    data = text.buffers()[2]
    if data is None:
        return False
    offsets = np.frombuffer(text.buffers()[1], np.int32, len(text) + 1, text.offset * 4)
    starts = offsets[:-1][offsets[1:] > offsets[:-1]]
    return bool(_FORMULA_FIRST[np.frombuffer(data, np.uint8)[starts]].any())


def _may_need_quotes(text: pa.StringArray) -> bool:
    """Whether a cell of `text` may hold a comma, a quote, CR or LF: all its bytes searched at once."""
    if text.buffers()[2] is None:
        return False
    raw = values(text).tobytes()
    return any(char in raw for char in _QUOTED)


def _replaced(text: pa.Array, pattern: str, replacement: str) -> pa.Array:
    """`text` (plain or large strings) with `pattern` replaced once; as it is when nothing matches (most columns)."""
    if not pc.any(pc.match_substring_regex(text, pattern)).as_py():
        return text
    return pc.replace_substring_regex(text, pattern=pattern, replacement=replacement, max_replacements=1)


def _replace_in_text(data: Data, pattern: str, replacement: str) -> Data:
    columns = []
    for field, column in zip(data.schema, data.columns):
        if _is_text(field.type):
            if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
                column = column.cast(pa.string())  # string views and dictionaries: the regex kernels take plain strings
            column = _replaced(column, pattern, replacement)
        columns.append(column)
    return type(data).from_arrays(columns, names=data.schema.names)


def _is_text(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        return _is_text(type_.value_type)
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_)
