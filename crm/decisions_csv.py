"""A decisions file as an admin saves it from Excel: the reconciliation CSV with its `decision` column filled
(confirm / reject on probable matches), or the plan CSV with its `decision` column filled (approve / exclude
per planned change).

What Excel writes is accepted as it comes: `,` or `;` between cells (Excel uses the list separator of the
locale: `;` where the decimal mark is a comma), UTF-8 with or without a BOM, or cp1252 ("CSV (Comma
delimited)" in Western locales), CRLF or LF. Headers match in any case. The ' our files put before cells a
spreadsheet would run is taken off again (Excel keeps it, or drops it on saving). Rows whose decision is empty
are skipped; a row with any other problem is named with its line in the report, never dropped silently.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Literal

Kind = Literal["pairs", "plan"]
PAIR_DECISIONS = ("confirm", "reject")
PLAN_DECISIONS = ("approve", "exclude")
MAX_BYTES = 200 * 1024 * 1024


class DecisionsFileError(ValueError):
    """The file as a whole cannot be read as decisions; str() is one line saying why and what to do."""


@dataclass(frozen=True)
class Row:
    line: int  # line of the file (the header is line 1)
    decision: str  # as written, lower-cased and trimmed
    kol_id: str | None
    crm_id: str | None
    plan_key: str | None
    problem: str | None  # why the row cannot be taken, found in the file itself


@dataclass(frozen=True)
class DecisionsFile:
    kind: Kind
    rows: list[Row]  # rows with a decision (empty decisions are skipped)
    skipped: int  # rows without a decision


def decode(data: bytes) -> str:
    """The file's text: UTF-8 (a BOM dropped), else cp1252."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            return data.decode("cp1252")
        except UnicodeDecodeError:
            raise DecisionsFileError("the file is neither UTF-8 nor Windows-1252 text: save it from Excel as CSV") from None


def _cell(value: str | None) -> str | None:
    value = (value or "").strip()
    if value.startswith("'") and value[1:2] in ("=", "+", "-", "@", "\t", "\r", "'"):
        value = value[1:]  # the spreadsheet_csv quote
    return value or None


def parse(data: bytes) -> DecisionsFile:
    """The decisions of a reconciliation CSV or a plan CSV; DecisionsFileError when it is neither."""
    if len(data) > MAX_BYTES:
        raise DecisionsFileError(f"the file is larger than {MAX_BYTES // 1024 // 1024} MB: split it")
    if b"\x00" in data[:4096]:
        raise DecisionsFileError("the file is not a CSV (it holds binary data; an .xlsx?): save it from Excel as CSV")
    text = decode(data)
    first = text.split("\n", 1)[0]
    if not first.strip():
        raise DecisionsFileError("the file is empty: upload the reconciliation CSV or the plan CSV with decisions filled in")
    delimiter = ";" if first.count(";") > first.count(",") else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = [(name or "").strip().lstrip("\ufeff").lower() for name in next(reader)]
        if "decision" not in header:
            raise DecisionsFileError("the file has no `decision` column: fill in the `decision` column of the "
                                     "reconciliation CSV (confirm / reject) or of the plan CSV (approve / exclude)")
        if "plan_key" in header:
            kind: Kind = "plan"
            allowed = PLAN_DECISIONS
        elif "kol_id" in header and "crm_id" in header:
            kind, allowed = "pairs", PAIR_DECISIONS
        else:
            raise DecisionsFileError("the file has a `decision` column but neither `plan_key` (the plan CSV) nor "
                                     "`kol_id` and `crm_id` (the reconciliation CSV): keep those columns")
        column = {name: i for i, name in reversed(list(enumerate(header)))}
        rows: list[Row] = []
        skipped = 0
        for record in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in record):
                continue

            def get(name: str) -> str | None:
                i = column.get(name)
                return _cell(record[i]) if i is not None and i < len(record) else None

            decision = (get("decision") or "").lower()
            if not decision:
                skipped += 1
                continue
            kol_id, crm_id, plan_key = get("kol_id"), get("crm_id"), get("plan_key")
            problem = None
            if decision not in allowed:
                problem = f"decision {decision!r} is not {' or '.join(allowed)}"
            elif kind == "plan" and not plan_key:
                problem = "no plan_key on this row"
            elif kind == "pairs" and not (kol_id and crm_id):
                problem = "a decision needs both kol_id and crm_id (a probable match's row)"
            rows.append(Row(line, decision, kol_id, crm_id, plan_key, problem))
    except csv.Error as error:
        raise DecisionsFileError(f"line {reader.line_num} is not valid CSV ({error}): save the file from Excel "
                                 "as CSV again") from None
    return DecisionsFile(kind, rows, skipped)
