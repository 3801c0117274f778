"""Helpers for the sync tests: read the service through plain HTTP, read the warehouse, compare."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow as pa

from sync.catalog import CATALOG, ResourceSpec
from sync.schemas import EXTRA_COLUMN, FETCHED_AT
from commops_spec.timestamps import parse_timestamp
from resources.settings import API_KEY_ENV

LOAD_COLUMNS = ("_snapshot_date", "_loaded_at", FETCHED_AT)  # when the sync read and wrote a row


def api_items(service: Any, spec: ResourceSpec) -> dict[str, dict[str, Any]]:
    """Every item of the resource as the API returns it (a plain sequential pager, not the client under test)."""
    items: dict[str, dict[str, Any]] = {}
    headers = {"Authorization": f"Bearer {service.api_key}"}
    with httpx.Client(base_url=service.base_url, headers=headers, timeout=30) as http:
        for params in spec.walks:
            page = 1
            while True:
                body = http.get(spec.path, params={**params, "per_page": 100, "page": page}).raise_for_status().json()
                for item in body["data"]:
                    items[item["id"]] = item
                if page * 100 >= body["meta"]["total"]:
                    break
                page += 1
    return items


def api_detail(service: Any, kol_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    return httpx.get(f"{service.base_url}/kols/{kol_id}", headers=headers, timeout=30).raise_for_status().json()["data"]


def connect(db_path: Path) -> duckdb.DuckDBPyConnection:
    """As docs/analysts.md tells analysts: read-only, relative lake paths resolved in the data directory."""
    return duckdb.connect(str(db_path), read_only=True, config={"file_search_path": str(Path(db_path).parent)})


def table_rows(db_path: Path, table: str, key: str = "id") -> dict[str, dict[str, Any]]:
    conn = connect(db_path)
    try:
        rows = conn.sql(f"SELECT * FROM {table}").to_arrow_table().to_pylist()
    finally:
        conn.close()
    return {row[key]: row for row in rows}


def query(db_path: Path, sql: str) -> list[tuple]:
    conn = connect(db_path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def assert_same_value(api_value: Any, db_value: Any, type_: pa.DataType, where: str) -> None:
    """The API's JSON value equals the warehouse value of the Arrow type, recursively."""
    if api_value is None:
        assert db_value is None, f"{where}: API null, warehouse {db_value!r}"
        return
    assert db_value is not None, f"{where}: API {api_value!r}, warehouse NULL"
    if pa.types.is_timestamp(type_):
        expected = parse_timestamp(api_value)  # every ISO 8601 form; no zone designator = UTC
        assert db_value.astimezone(UTC) == expected, f"{where}: {api_value} != {db_value}"
    elif pa.types.is_struct(type_):
        assert isinstance(api_value, dict), where
        for f in type_:
            assert_same_value(api_value.get(f.name), db_value.get(f.name), f.type, f"{where}.{f.name}")
    elif pa.types.is_map(type_):
        db_map = dict(db_value)
        assert set(db_map) == set(api_value), f"{where}: keys {sorted(api_value)} != {sorted(db_map)}"
        for key, item in api_value.items():
            assert_same_value(item, db_map[key], type_.item_type, f"{where}[{key}]")
    elif pa.types.is_list(type_):
        assert len(api_value) == len(db_value), f"{where}: {api_value!r} != {db_value!r}"
        for i, (a, d) in enumerate(zip(api_value, db_value)):
            assert_same_value(a, d, type_.value_type, f"{where}[{i}]")
    elif pa.types.is_floating(type_):
        assert math.isclose(float(api_value), db_value, rel_tol=0, abs_tol=1e-12), f"{where}: {api_value} != {db_value}"
    else:
        assert api_value == db_value, f"{where}: API {api_value!r} != warehouse {db_value!r}"


def assert_row_equals_item(item: dict[str, Any], row: dict[str, Any], schema: pa.Schema, where: str) -> None:
    """Every schema field equal; fields the API omitted are NULL; nothing unknown dropped; the sync's
    own columns (_extra, _fetched_at) are the sync's."""
    known = {f.name for f in schema}
    if FETCHED_AT in known:
        assert row[FETCHED_AT] is not None, f"{where}: no {FETCHED_AT}"
    for f in schema:
        if f.name in (EXTRA_COLUMN, FETCHED_AT):
            continue
        assert_same_value(item.get(f.name), row[f.name], f.type, f"{where}.{f.name}")
    unknown = set(item) - known
    if not unknown:
        assert row[EXTRA_COLUMN] is None, f"{where}: unexpected _extra {row[EXTRA_COLUMN]}"


def assert_sent_fields_equal(item: dict[str, Any], row: dict[str, Any], schema: pa.Schema, where: str) -> None:
    """Every field the server sent equals the warehouse's (a server may omit what the spec does not
    promise, e.g. is_archived); fields the schema lacks are kept in _extra."""
    known = {f.name for f in schema}
    for f in schema:
        if f.name in item and f.name != EXTRA_COLUMN:
            assert_same_value(item[f.name], row[f.name], f.type, f"{where}.{f.name}")
    unknown = set(item) - known
    if unknown:
        extra = json.loads(row[EXTRA_COLUMN] or "{}")
        for name in unknown:
            assert extra.get(name) == item[name], f"{where}: {name} not kept in _extra"


def warehouse_state(db_path: Path) -> dict[str, list[tuple]]:
    """Every current-state and child table, load columns left out, sorted: for exact comparisons."""
    tables = [spec.table for spec in CATALOG] + [c.name for spec in CATALOG for c in spec.children]
    conn = connect(db_path)
    try:
        state = {}
        for table in tables:
            columns = [
                name
                for (name,) in conn.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index", [table]
                ).fetchall()
                if name not in LOAD_COLUMNS
            ]
            quoted = ", ".join(f'"{c}"' for c in columns)
            state[table] = sorted(map(repr, conn.execute(f"SELECT {quoted} FROM {table}").fetchall()))
        return state
    finally:
        conn.close()


@contextmanager
def api_key_in_env(api_key: str, name: str = API_KEY_ENV) -> Iterator[None]:
    """The key where the API resource reads it (a dg.EnvVar), for the duration of a run."""
    before = os.environ.get(name)
    os.environ[name] = api_key
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def with_orgs(instance: Any, *orgs: str) -> Any:
    """`instance` with the organizations as partitions of `orgs` (default: the organization `default`),
    as `commops sync` and the orgs sensor add them; returns it."""
    from assets.partitions import ORGS

    missing = [org for org in (orgs or ("default",)) if not instance.has_dynamic_partition(ORGS.name, org)]
    if missing:
        instance.add_dynamic_partitions(ORGS.name, missing)
    return instance


def sync(service: Any, data_dir: Path, **kwargs: Any):
    """run_sync against a test service (today's snapshot), on an ephemeral Dagster instance, no rich display,
    and without the dbt marts (half a small sync's time) unless `marts=True`: the tests of what the marts
    hold ask for them."""
    import dagster as dg

    from commops_cli.sync_run import run_sync

    kwargs.setdefault("progress", False)
    kwargs.setdefault("marts", False)
    kwargs.setdefault("enrich_details_limit", 0)
    kwargs.setdefault("instance", dg.DagsterInstance.ephemeral())
    with api_key_in_env(service.api_key):
        return run_sync(base_url=service.base_url, data_dir=data_dir, **kwargs)
