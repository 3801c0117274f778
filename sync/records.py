"""API records (JSON dicts) to Arrow record batches of an explicit schema.

Fields the schema does not know are moved, top-level or nested, into the JSON column
`_extra`; a value whose type does not fit its field is moved there too (and the field left
NULL), so schema drift never crashes a sync and never loses data.

Timestamps are read in every ISO 8601 form (commops_spec.timestamps: `Z`, offsets, fractions, no
zone designator = UTC). A value that is present but cannot be read (a timestamp that is not one, a
string where a number belongs) is never turned into NULL without a word: it is kept raw in `_extra`
and counted in `RecordConverter.unreadable` (field path -> count), which the assets put in the run's
metadata.
"""

from __future__ import annotations

import io
import itertools
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from commops_spec.timestamps import UnreadableTimestamp, format_timestamp, parse_timestamp

from sync.schemas import EXTRA_COLUMN


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


_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError)
# A zone designator at the end of an (upper-cased) ISO 8601 timestamp: Z, +HH, +HHMM or +HH:MM.
_ZONED = r"(Z|[+-]\d{2}(:?\d{2})?)$"
_UNREADABLE = object()  # marks a timestamp leaf that is present but not a timestamp


class RecordConverter:
    """Converts pages of API records into record batches of `schema` (which ends with _extra).

    `ignored` names fields that are known elsewhere and deliberately not stored here
    (e.g. the KOL detail's list-shape fields); `defaults` fills fields a record lacks.
    `unreadable` counts, per field path (`schedule.send_at`), the values kept raw in _extra
    because they could not be read as their field's type.
    """

    def __init__(self, schema: pa.Schema, ignored: Iterable[str] = (), defaults: Mapping[str, Any] | None = None):
        self.schema = schema
        self._data_schema = pa.schema([f for f in schema if f.name != EXTRA_COLUMN])
        self._raw = raw_schema(schema)
        self._struct = pa.struct(list(self._data_schema))
        self._ignored = frozenset(ignored)
        self._defaults = dict(defaults or {})
        self._drifts = _drift_check(self._struct)
        self.unreadable: Counter[str] = Counter()
        self._page_schema = _page_item_type(self._data_schema) if not self._ignored else None
        if self._page_schema is not None:
            envelope = pa.schema([("data", pa.list_(self._page_schema)), ("meta", _PAGE_META)])
            self._page_parse = pa_json.ParseOptions(
                explicit_schema=envelope, unexpected_field_behavior="infer", newlines_in_values=True
            )

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

    def decode_pages(self, bodies: Sequence[bytes]) -> list[tuple[pa.RecordBatch, dict[str, Any]]] | None:
        """List pages' items straight from their response bytes, and their metas, without Python objects:
        one call of pyarrow's JSON reader against this schema for all of them (its fixed cost per call is
        about a page's parse; it releases the GIL), one cast per column, then a slice per page. None when
        one of them needs another path: an unknown field at any depth, a value of another type, a
        timestamp the vectorized cast cannot read, a map field, a body that is not one list envelope
        (the caller then decodes them one by one, and reads as dicts a page that still will not decode)."""
        if self._page_schema is None or not bodies:
            return None
        try:
            table = pa_json.read_json(io.BytesIO(b"\n".join(bodies)), read_options=_PAGE_READ, parse_options=self._page_parse)
            data, metas = table.column("data").combine_chunks(), table.column("meta").to_pylist()
        except (*_CONVERSION_ERRORS, KeyError, IndexError):
            return None
        if len(data) != len(bodies) or data.null_count or not all(isinstance(m, dict) for m in metas):
            return None  # a body held no envelope, or more than one
        items = data.flatten()
        if items.type != self._page_schema:
            return None  # inferred extra fields: the dict path keeps what is unknown
        try:
            batch = pa.RecordBatch.from_arrays([self._page_column(items, f) for f in self.schema], schema=self.schema)
        except _CONVERSION_ERRORS:
            return None
        bounds = list(itertools.accumulate(pc.list_value_length(data).to_pylist(), initial=0))
        return [(batch.slice(start, end - start), meta) for start, end, meta in zip(bounds, bounds[1:], metas)]

    def _page_column(self, items: pa.StructArray, f: pa.Field) -> pa.Array:
        index = self._page_schema.get_field_index(f.name)
        if index < 0:  # _extra, _fetched_at: not sent by the API
            return pa.nulls(len(items), f.type)
        column = _cast_column(pa.chunked_array([items.field(index)]), f.type).combine_chunks()
        if f.name in self._defaults:
            column = pc.fill_null(column, pa.scalar(self._defaults[f.name], f.type))
        return column

    def to_batch(self, records: Iterable[Mapping[str, Any]]) -> pa.RecordBatch:
        rows = [self._split(r) for r in records]
        try:
            return self._convert(rows)
        except _CONVERSION_ERRORS:
            return self._convert([self._repair(row) for row in rows])

    def _convert(self, rows: list[dict[str, Any]]) -> pa.RecordBatch:
        raw = pa.Table.from_pylist(rows, schema=self._raw).combine_chunks()
        columns = [_cast_column(raw.column(i), f.type) for i, f in enumerate(self.schema)]
        table = pa.Table.from_arrays(columns, schema=self.schema)
        batches = table.to_batches()
        return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=self.schema)

    def _repair(self, row: dict[str, Any]) -> dict[str, Any]:
        """Read every timestamp leaf in Python, then move every value that still does not convert into
        _extra, counting it (slow path: only pages holding a value the fast path could not read)."""
        extra = json.loads(row[EXTRA_COLUMN]) if row[EXTRA_COLUMN] else {}
        for f in self._data_schema:
            value = row.get(f.name)
            if value is None:
                continue
            read, unreadable = _read_timestamps(value, f.type)
            try:
                pa.array([read], type=_stringly(f.type)).cast(f.type)
            except _CONVERSION_ERRORS:
                _merge_extra(extra, f.name, value)
                self.unreadable[f.name] += 1
                row[f.name] = None
                continue
            row[f.name] = read
            if unreadable is not None:
                _merge_extra(extra, f.name, unreadable)
                self._count(f.name, unreadable)
        row[EXTRA_COLUMN] = json.dumps(extra, sort_keys=True, default=str) if extra else None
        return row

    def _count(self, path: str, unreadable: Any) -> None:
        if isinstance(unreadable, dict):
            for key, nested in unreadable.items():
                self._count(f"{path}.{key}", nested)
        elif isinstance(unreadable, list):
            for nested in unreadable:
                if nested is not None:
                    self._count(path, nested)
        else:
            self.unreadable[path] += 1


_PAGE_READ = pa_json.ReadOptions(use_threads=False, block_size=64 << 20)
_PAGE_META = pa.struct([("page", pa.int64()), ("per_page", pa.int64()), ("total", pa.int64()), ("total_pages", pa.int64())])


def _page_item_type(schema: pa.Schema) -> pa.StructType | None:
    """The struct type of a list item as JSON carries it (timestamps as strings), the sync's own columns
    (`_...`) left out; None for a schema with a map (JSON objects read as structs, not maps)."""
    fields = [pa.field(f.name, _stringly(f.type)) for f in schema if not f.name.startswith("_")]
    if any(_has_map(f.type) for f in fields):
        return None
    return pa.struct(fields)


def _has_map(type_: pa.DataType) -> bool:
    if pa.types.is_map(type_):
        return True
    if pa.types.is_struct(type_):
        return any(_has_map(f.type) for f in type_)
    if pa.types.is_list(type_):
        return _has_map(type_.value_type)
    return False


def _cast_column(column: pa.ChunkedArray, type_: pa.DataType) -> pa.ChunkedArray:
    """Arrow's cast; a top-level timestamp column whose strings lack a zone designator (UTC) is
    given `Z` first. Anything else that does not cast raises (the caller repairs row by row)."""
    try:
        return column.cast(type_)
    except _CONVERSION_ERRORS:
        if not pa.types.is_timestamp(type_):
            raise
    upper = pc.utf8_upper(pc.utf8_trim_whitespace(column))
    zoned = pc.if_else(pc.match_substring_regex(upper, _ZONED), upper, pc.binary_join_element_wise(upper, "Z", ""))
    return zoned.cast(type_)


def _read_timestamps(value: Any, type_: pa.DataType) -> tuple[Any, Any]:
    """(value with every timestamp leaf of `type_` in the one form Arrow reads, the unreadable leaves
    in the shape of _extra or None). Unreadable leaves become None in the returned value."""
    if pa.types.is_timestamp(type_):
        if not isinstance(value, str):
            return value, None  # not a string at all: left for the conversion to refuse
        try:
            return format_timestamp(parse_timestamp(value)), None
        except UnreadableTimestamp:
            return None, value
    if isinstance(value, Mapping) and pa.types.is_struct(type_):
        known, bad = dict(value), {}
        for key, item in value.items():
            index = type_.get_field_index(key)
            if index >= 0 and item is not None:
                known[key], unreadable = _read_timestamps(item, type_.field(index).type)
                if unreadable is not None:
                    bad[key] = unreadable
        return known, (bad or None)
    if isinstance(value, list) and pa.types.is_list(type_):
        pairs = [_read_timestamps(item, type_.value_type) if item is not None else (None, None) for item in value]
        bad_items = [b for _, b in pairs]
        return [v for v, _ in pairs], (bad_items if any(b is not None for b in bad_items) else None)
    if isinstance(value, Mapping) and pa.types.is_map(type_):
        known, bad = {}, {}
        for key, item in value.items():
            known[key], unreadable = _read_timestamps(item, type_.item_type) if item is not None else (None, None)
            if unreadable is not None:
                bad[key] = unreadable
        return known, (bad or None)
    return value, None


def _merge_extra(extra: dict[str, Any], name: str, value: Any) -> None:
    """Put `value` at extra[name], merging into what is already there (unknown nested keys)."""
    current = extra.get(name)
    if isinstance(current, dict) and isinstance(value, dict):
        for key, item in value.items():
            _merge_extra(current, key, item)
    else:
        extra[name] = value
