"""A row's digest: a hash of its content, every field but those recording when it was received.

The lake's snapshots carry it, hashed as each page is written (resources/lake.py), and so do the
warehouse's tables: a merge tells an unchanged row by its digest alone, reading only ids, versions and
digests of a snapshot, and the wide rows only of what changed (resources/warehouse.py). Both sides hash
with DuckDB's `hash()` over the same fields in the schema's order, so a digest written in the lake equals
the one the warehouse would compute from the same row. Should that ever differ (a DuckDB release changing
`hash()`), every row looks changed once and is rewritten: slower for a night, never wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

DIGEST_COLUMN = "_digest"
DIGEST_COMMENT = "Hash of the row's content (every field but when it was received): tells an unchanged row"
DIGEST_FIELD = pa.field(DIGEST_COLUMN, pa.uint64(), metadata={"description": DIGEST_COMMENT})


def content_fields(schema: pa.Schema, observed: Iterable[str]) -> tuple[str, ...]:
    """The fields a row's digest hashes: the schema's, in order, but those recording when it was received."""
    left_out = set(observed)
    return tuple(f.name for f in schema if f.name not in left_out)


def digest_sql(fields: Iterable[str]) -> str:
    """DuckDB SQL: the digest of a row with these fields."""
    quoted = ", ".join('"' + name + '"' for name in fields)
    return f"hash({quoted})"
