"""Request paths naming one object: the only place an id enters a path.

Each value is percent-encoded whole (`/`, `?`, `#`, `%` and the rest), and a value of `.` or `..`
is encoded too, so no value can add a segment, climb out of its collection or start a query.
"""

from __future__ import annotations

from urllib.parse import quote


def item_path(template: str, **segments: str) -> str:
    """`template` ("/kols/{id}") with each named segment filled in, percent-encoded."""
    return template.format(**{name: _segment(value) for name, value in segments.items()})


def _segment(value: str) -> str:
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded
