"""The person a request is about, and how a stored row or text is recognised as theirs.

A row holds the person when any of its values holds one of their KOL ids or email addresses as a whole
token (`kol_ab` never matches `kol_abc`; emails compared lower-cased and trimmed). Names are not used:
two physicians may share one, and every store that holds a name holds the id or the email beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ID_EDGE = r"A-Za-z0-9_\-"
_EMAIL_EDGE = r"a-z0-9._%+\-"


def normalize_email(address: str) -> str:
    return address.strip().lower()


@dataclass(frozen=True)
class Subject:
    """The KOL ids and email addresses of one request (an email may belong to several KOLs)."""

    kol_ids: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    org: str | None = None  # the organization (commops orgs) whose rows are searched; None: every one

    def __post_init__(self) -> None:
        object.__setattr__(self, "kol_ids", tuple(sorted(set(self.kol_ids))))
        object.__setattr__(self, "emails", tuple(sorted({normalize_email(e) for e in self.emails if e and e.strip()})))

    def with_(self, kol_ids: tuple[str, ...] = (), emails: tuple[str, ...] = ()) -> Subject:
        return Subject(self.kol_ids + tuple(kol_ids), self.emails + tuple(emails), self.org)

    @property
    def empty(self) -> bool:
        return not self.kol_ids and not self.emails

    def pattern(self) -> str:
        """A regular expression (RE2 and Python alike) matching the person in lower-cased text."""
        parts = [rf"(^|[^{_ID_EDGE}]){re.escape(i.lower())}($|[^{_ID_EDGE}])" for i in self.kol_ids]
        parts += [rf"(^|[^{_EMAIL_EDGE}]){re.escape(e)}($|[^{_EMAIL_EDGE}])" for e in self.emails]
        return "|".join(parts) if parts else r"$^"

    def matches(self, text: str) -> bool:
        return re.search(self.pattern(), text.lower()) is not None

    def duckdb_predicate(self, alias: str, org_column: bool = False, columns: list[tuple[str, str]] | None = None) -> str:
        """A DuckDB condition true for the rows of `alias` (a table or read_parquet alias) holding the person;
        with `org_column`, only the rows of the subject's organization. Given the relation's (name, DuckDB type)
        `columns`, only its text and nested columns are read (numbers and times cannot hold an id or an email:
        about twice as fast as the whole row)."""
        from resources.sql import sql_literal

        if columns is None:
            text = f"CAST({alias} AS VARCHAR)"
        else:
            parts = [f'{alias}."{name}"' if type_ in ("VARCHAR", "JSON") else f'CAST({alias}."{name}" AS VARCHAR)'
                     for name, type_ in columns if _may_hold_text(type_)]
            if not parts:
                return "false"
            text = f"concat_ws(chr(31), {', '.join(parts)})"
        match = f"regexp_matches(lower({text}), {sql_literal(self.pattern())})"
        return f"({match} AND {alias}.org = {sql_literal(self.org)})" if org_column and self.org else match


def _may_hold_text(type_: str) -> bool:
    return type_ in ("VARCHAR", "JSON", "BLOB") or any(mark in type_ for mark in ("STRUCT", "MAP", "[]", "UNION", "VARCHAR"))
