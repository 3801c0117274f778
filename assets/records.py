"""API records (JSON dicts) to Arrow record batches of an explicit schema.

Fields the schema does not know are moved, top-level or nested, into the JSON column
`_extra`; a value whose type does not fit its field is moved there too (and the field left
NULL), so schema drift never crashes a sync and never loses data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from assets.schemas import EXTRA_COLUMN


def _stringly(type_: pa.DataType) -> pa.DataType:
    """The type the JSON arrives in: timestamps are ISO strings, cast afterwards."""
    if pa.types.is_timestamp(type_):
        return pa.string()
    if pa.types.is_struct(type_):
        return pa.struct([pa.field(f.name, _stringly(f.type)) for f in type_])
    if pa.types.is_list(type_):
        return pa.list_(_stringly(type_.value_type))
    if pa.types.is_map(type_):
        return pa.map_(type_.key_type, _stringly(type_.item_type))
    return type_


def raw_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _stringly(f.type)) for f in schema])


def split_known(value: Any, type_: pa.DataType) -> tuple[Any, Any]:
    """(the part of value the type knows, the unknown remainder or None)."""
    if isinstance(value, Mapping) and pa.types.is_struct(type_):
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, item in value.items():
            index = type_.get_field_index(key)
            if index < 0:
                extra[key] = item
                continue
            known[key], nested_extra = split_known(item, type_.field(index).type)
            if nested_extra is not None:
                extra[key] = nested_extra
        return known, (extra or None)
    if isinstance(value, list) and pa.types.is_list(type_) and pa.types.is_struct(type_.value_type):
        pairs = [split_known(item, type_.value_type) for item in value]
        extras = [e for _, e in pairs]
        return [k for k, _ in pairs], (extras if any(e is not None for e in extras) else None)
    if isinstance(value, Mapping) and pa.types.is_map(type_):
        if not pa.types.is_struct(type_.item_type):
            return list(value.items()), None
        known_items, extra = [], {}
        for key, item in value.items():
            k, e = split_known(item, type_.item_type)
            known_items.append((key, k))
            if e is not None:
                extra[key] = e
        return known_items, (extra or None)
    return value, None


def _drift_check(type_: pa.DataType):
    """A predicate telling whether a JSON value may hold something `type_` does not know
    (an unknown key at any depth, or a container of the wrong kind); None when no value of
    this type can (scalars, lists of scalars: a wrong scalar type is caught on conversion)."""
    if pa.types.is_struct(type_):
        names = frozenset(f.name for f in type_)
        children = [(f.name, check) for f in type_ if (check := _drift_check(f.type)) is not None]

        def struct_drifts(value: Any) -> bool:
            if not isinstance(value, dict) or not value.keys() <= names:
                return True
            for name, check in children:
                item = value.get(name)
                if item is not None and check(item):
                    return True
            return False

        return struct_drifts
    if pa.types.is_list(type_) and (item_check := _drift_check(type_.value_type)) is not None:
        return lambda value: not isinstance(value, list) or any(i is not None and item_check(i) for i in value)
    if pa.types.is_map(type_):
        value_check = _drift_check(type_.item_type)
        return lambda value: not isinstance(value, dict) or (
            value_check is not None and any(v is not None and value_check(v) for v in value.values())
        )
    return None


class RecordConverter:
    """Converts pages of API records into record batches of `schema` (which ends with _extra).

    `ignored` names fields that are known elsewhere and deliberately not stored here
    (e.g. the KOL detail's list-shape fields); `defaults` fills fields a record lacks.
    """

    def __init__(self, schema: pa.Schema, ignored: Iterable[str] = (), defaults: Mapping[str, Any] | None = None):
        self.schema = schema
        self._data_schema = pa.schema([f for f in schema if f.name != EXTRA_COLUMN])
        self._raw = raw_schema(schema)
        self._struct = pa.struct(list(self._data_schema))
        self._ignored = frozenset(ignored)
        self._defaults = dict(defaults or {})
        self._drifts = _drift_check(self._struct)

    def _split(self, record: Mapping[str, Any]) -> dict[str, Any]:
        if self._ignored:
            record = {k: v for k, v in record.items() if k not in self._ignored}
        if self._drifts(record):
            known, extra = split_known(record, self._struct)
        else:  # the common case: nothing unknown, checked with set operations only
            known, extra = dict(record), None
        for key, value in self._defaults.items():
            if known.get(key) is None:
                known[key] = value
        known[EXTRA_COLUMN] = json.dumps(extra, sort_keys=True, default=str) if extra else None
        return known

    def to_batch(self, records: Iterable[Mapping[str, Any]]) -> pa.RecordBatch:
        rows = [self._split(r) for r in records]
        try:
            return self._convert(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
            return self._convert([self._repair(row) for row in rows])

    def _convert(self, rows: list[dict[str, Any]]) -> pa.RecordBatch:
        table = pa.Table.from_pylist(rows, schema=self._raw).cast(self.schema)
        batches = table.combine_chunks().to_batches()
        return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=self.schema)

    def _repair(self, row: dict[str, Any]) -> dict[str, Any]:
        """Move every field whose value does not convert into _extra (slow path, drifted rows only)."""
        extra = json.loads(row[EXTRA_COLUMN]) if row[EXTRA_COLUMN] else {}
        for f in self._data_schema:
            value = row.get(f.name)
            if value is None:
                continue
            try:
                pa.array([value], type=_stringly(f.type)).cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
                extra[f.name] = value
                row[f.name] = None
        row[EXTRA_COLUMN] = json.dumps(extra, sort_keys=True, default=str) if extra else None
        return row
