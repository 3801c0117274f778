"""Dataclasses that travel as Dagster materialization metadata.

An asset reports its typed result with `record.as_metadata()`; whoever reads the run (the `commops`
command) rebuilds it with `Record.from_metadata(entries)`. So each metadata key is written once, in
the dataclass: a field's name, or the key `reported_as` gives it.

Plain values only, no Dagster import (the libraries use it too): Dagster stores ints, floats, bools,
text, lists and dicts (as JSON) and paths as its own metadata types; floats are reported to the
millisecond, a datetime as ISO text, a field left None not at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Self, get_args, get_type_hints

ROW_COUNT = "dagster/row_count"  # Dagster's own key: the UI plots it as the asset's row count

_KEY = "metadata_key"  # in a field's metadata: the entry's key, None for a field that is not reported
_SPREAD = "spread_over"  # in a dict field's metadata: the keys its items are reported under, one entry each


def reported_as(key: str, **field_args: Any) -> Any:
    """A field reported under another key than its name."""
    return dataclasses.field(metadata={_KEY: key}, **field_args)


def unreported(**field_args: Any) -> Any:
    """A field the metadata does not carry (the reader supplies it, e.g. the run id)."""
    return dataclasses.field(metadata={_KEY: None}, **field_args)


def spread_over(keys: Iterable[str], **field_args: Any) -> Any:
    """A dict field reported as one entry per key, so that the UI plots each."""
    return dataclasses.field(metadata={_SPREAD: tuple(keys)}, **field_args)


def plain_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata entries as plain values (a Dagster metadata value's `.value`)."""
    return {key: getattr(entry, "value", entry) for key, entry in metadata.items()}


class MetadataRecord:
    """Mixed into a dataclass: `as_metadata()`, `from_metadata()`, and `record[key]`: the value reported
    under `key`, as the UI shows it."""

    def __getitem__(self, key: str) -> Any:
        return self.as_metadata()[key]

    def as_metadata(self) -> dict[str, Any]:
        entries: dict[str, Any] = {}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if _SPREAD in field.metadata:
                entries.update(value)
            elif _key(field) is not None and value is not None:
                entries[_key(field)] = _reported(value)
        return entries

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], **given: Any) -> Self | None:
        """The record the entries report (Dagster metadata values or plain values), `given` the fields
        the metadata does not carry; None when the entries report none of its fields."""
        entries = plain_values(metadata)
        hints = get_type_hints(cls)
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if _SPREAD in field.metadata:
                spread = {key: entries[key] for key in field.metadata[_SPREAD] if key in entries}
                if spread:
                    values[field.name] = spread
            elif _key(field) in entries:
                values[field.name] = _typed(entries[_key(field)], hints[field.name])
        return cls(**values, **given) if values else None


def _key(field: dataclasses.Field) -> str | None:
    return field.metadata.get(_KEY, field.name)


def _reported(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _typed(value: Any, hint: Any) -> Any:
    """A plain value as the field's type, where the metadata's type differs (paths, datetimes)."""
    types = get_args(hint) or (hint,)
    if isinstance(value, str) and Path in types:
        return Path(value)
    if isinstance(value, str) and datetime in types:
        return datetime.fromisoformat(value)
    return value
