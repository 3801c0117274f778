"""Case-insensitive search for every script: a folded copy of the searchable text per row.

SQLite's LIKE folds ASCII letters only (`Zürich` and `ZÜRICH` differ). Each searchable
table therefore keeps a `search_text` column: its searched fields, each folded with
`fold` (Unicode NFKC, full case folding, NFKC again: the Unicode "NFKC_Casefold" idea),
joined by SEPARATOR. A search folds its term the same way and matches it with instr()
on that one column, so a list with a search reads one column per row, as before.

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

# table -> searched columns, in the order they are joined
FIELDS: dict[str, tuple[str, ...]] = {
    "kols": ("full_name", "institution", "email"),
    "campaigns": ("name",),
    "products": ("name", "description"),
    "signals": ("title", "content"),
}


def fold(value: str) -> str:
    """`value` without case and normalization differences, control characters as spaces."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())
    return _CONTROL.sub(" ", folded)


def text(values: Iterable[str | None]) -> str:
    """The search_text of a row whose searched fields hold `values`."""
    return SEPARATOR.join(fold(value) if value else "" for value in values)


def add_column(conn: sqlite3.Connection) -> None:
    """Add and fill search_text in tables created before it existed (inside the caller's transaction)."""
    for table, columns in FIELDS.items():
        if _has_column(conn, table):
            continue
        conn.execute(f"ALTER TABLE {table} ADD COLUMN search_text TEXT NOT NULL DEFAULT ''")
        rows = conn.execute(f"SELECT rowid, {', '.join(columns)} FROM {table}").fetchall()
        conn.executemany(f"UPDATE {table} SET search_text = ? WHERE rowid = ?",
                         ((text(row[1:]), row[0]) for row in rows))


def _has_column(conn: sqlite3.Connection, table: str) -> bool:
    return any(row[1] == "search_text" for row in conn.execute(f"PRAGMA table_info({table})"))


def with_text(table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Iterable[tuple[object, ...]]:
    """Bulk-load rows (tuples in `columns` order) with their search_text appended."""
    positions = [columns.index(name) for name in FIELDS[table]]
    for row in rows:
        yield (*row, text(row[i] for i in positions))  # type: ignore[misc]
