"""Case-insensitive search for every script: a folded copy of the searchable text per row.

SQLite's LIKE folds ASCII letters only (`Zürich` and `ZÜRICH` differ). Each searchable
table therefore keeps a `search_text` column: its searched fields, each folded with
`fold` (Unicode NFKC, full case folding, NFKC again: the Unicode "NFKC_Casefold" idea),
joined by SEPARATOR. A search folds its term the same way and matches it with instr()
on that one column, so a list with a search reads one column per row, as before.

Signals hold long content: a full folded copy of it made every signal row about half as
large again, and a full-scan search 1.43x slower. So a signal whose fields fold like
ASCII (folding changes nothing but A-Z: nearly every English notice) keeps search_text
empty, and a search matches its raw title and content with LIKE, which folds exactly
A-Z: the same result as instr() on the folded copy (see `condition`).

Accents stay significant (`Zurich` does not find `Zürich`); composed and decomposed
forms, compatibility forms (full-width letters, ligatures) and case are not.
Every store path that writes a searched field recomputes the column with `text`
(create/update functions, the seed's bulk load); `add_column` fills it in databases
created before it existed (run once by the schema migration in db.py).
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Sequence

SEPARATOR = "\x1f"  # between fields: fold() turns control characters into spaces, so no term can span two fields
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# table -> searched columns, in the order they are joined
FIELDS: dict[str, tuple[str, ...]] = {
    "kols": ("full_name", "institution", "email"),
    "campaigns": ("name",),
    "products": ("name", "description"),
    "signals": ("title", "content"),
}
# Tables whose search_text stays empty when LIKE on the raw fields finds the same (long fields).
COPY_ONLY_WHEN_FOLDING_MATTERS = frozenset({"signals"})


def fold(value: str) -> str:
    """`value` without case and normalization differences, control characters as spaces."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())
    return _CONTROL.sub(" ", folded)


def text(table: str, values: Iterable[str | None]) -> str:
    """The search_text of a row of `table` whose searched fields hold `values`."""
    values = list(values)
    if table in COPY_ONLY_WHEN_FOLDING_MATTERS and all(_folds_like_ascii(value) for value in values if value):
        return ""
    return SEPARATOR.join(fold(value) if value else "" for value in values)


def _folds_like_ascii(value: str) -> bool:
    """Folding `value` lower-cases A-Z and changes nothing else (no other case, form or control character)."""
    return fold(value) == value.translate(_ASCII_LOWER)


def condition(table: str, term: str) -> tuple[str, list[str]]:
    """SQL (and its parameters) true for the rows of `table` where a searched field holds `term`.

    An empty search_text of a COPY_ONLY_WHEN_FOLDING_MATTERS table means every field folds like
    ASCII: fold(field) is the field with A-Z lower-cased. The folded term holds no A-Z (checked
    for every code point), so "fold(term) in fold(field)" is "field LIKE %fold(term)%", LIKE
    comparing A-Z without case and every other character exactly."""
    folded = fold(term)
    if table not in COPY_ONLY_WHEN_FOLDING_MATTERS:
        return "instr(search_text, ?) > 0", [folded]
    pattern = "%" + folded.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    raw = " OR ".join(f"{column} LIKE ? ESCAPE '\\'" for column in FIELDS[table])
    return (f"CASE WHEN search_text = '' THEN ({raw}) ELSE instr(search_text, ?) > 0 END",
            [pattern] * len(FIELDS[table]) + [folded])


def add_column(conn: sqlite3.Connection) -> None:
    """Add and fill search_text in tables created before it existed (inside the caller's transaction)."""
    for table, columns in FIELDS.items():
        if _has_column(conn, table):
            continue
        conn.execute(f"ALTER TABLE {table} ADD COLUMN search_text TEXT NOT NULL DEFAULT ''")
        rows = conn.execute(f"SELECT rowid, {', '.join(columns)} FROM {table}").fetchall()
        conn.executemany(f"UPDATE {table} SET search_text = ? WHERE rowid = ?",
                         ((text(table, row[1:]), row[0]) for row in rows))


def _has_column(conn: sqlite3.Connection, table: str) -> bool:
    return any(row[1] == "search_text" for row in conn.execute(f"PRAGMA table_info({table})"))


def with_text(table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Iterable[tuple[object, ...]]:
    """Bulk-load rows (tuples in `columns` order) with their search_text appended."""
    positions = [columns.index(name) for name in FIELDS[table]]
    for row in rows:
        yield (*row, text(table, [row[i] for i in positions]))  # type: ignore[misc]
