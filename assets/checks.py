"""Data-quality checks of the catalog's resources, as SQL over a snapshot or a warehouse table.

The checks sit beside their assets: each asset declares `check_specs(...)` and yields the
results of `run_*_checks(...)` after its materialization (`apart`). Every check is generated from the
catalog entry (id prefix, required fields, enum columns, product references).

Two checks of every warehouse table read the sync's own history (`table_loads`, resources/sync_health.py):
the volume of tonight's snapshot against the last loads, and fields outside the spec seen for the first time.

A blocking check fails with ERROR severity: its table is not loaded and the run fails. Every other
check warns (WARN): the run lands, and `commops sync` prints one line per failed one.
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import duckdb

from sync.catalog import ResourceSpec
from resources.commops_api import ListingReport
from resources.sql import sql_literal

ROW_COUNT = "row_count_matches_api_total"
IDS = "ids_unique_and_prefixed"
REQUIRED = "required_fields_present"
ENUMS = "enum_values_valid"
PRODUCT_REFS = "product_ids_exist"
SNAPSHOT_IN_TABLE = "snapshot_rows_in_table"
VOLUME = "row_count_within_recent_loads"
SCHEMA_DRIFT = "no_new_fields"
WARN = dg.AssetCheckSeverity.WARN


def apart(asset_key: dg.AssetKey, result: dg.MaterializeResult) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """`result`'s materialization, then each of its check results naming its asset. Dagster looks up the
    partition's latest materialization once for a check result yielded so, and twice for one carried in the
    MaterializeResult: a lookup per check per run saved."""
    yield dg.MaterializeResult(asset_key=result.asset_key, metadata=result.metadata, data_version=result.data_version,
                               tags=result.tags)
    for check in result.check_results:
        yield dg.AssetCheckResult(asset_key=asset_key, check_name=check.check_name, passed=check.passed,
                                  metadata=check.metadata, severity=check.severity, description=check.description)


def snapshot_check_specs(spec: ResourceSpec, asset_key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec(ROW_COUNT, asset=asset_key, blocking=True,
                          description=f"Every row GET /v1{spec.path} counts is in the snapshot, proven while it paged; "
                          "rows created or archived meanwhile are counted and sampled as in flux"),
        dg.AssetCheckSpec(IDS, asset=asset_key, blocking=True,
                          description=f"Every id is unique and starts with {spec.id_prefix!r}"),
        dg.AssetCheckSpec(REQUIRED, asset=asset_key,
                          description=f"No NULL in {', '.join(spec.required)}"),
    ]
    if spec.enums:
        specs.append(dg.AssetCheckSpec(ENUMS, asset=asset_key,
                                       description=f"{', '.join(spec.enums)} within the spec's values"))
    return specs


def warehouse_check_specs(spec: ResourceSpec, asset_key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec(IDS, asset=asset_key,
                          description=f"One row per id in {spec.table}, ids prefixed {spec.id_prefix!r} and spec ids whole "
                          "(letters, digits, _ or - after the prefix; any other row is kept but never fetched by id)"),
        dg.AssetCheckSpec(SNAPSHOT_IN_TABLE, asset=asset_key,
                          description="Every id of the run's snapshot is in the table"),
        dg.AssetCheckSpec(VOLUME, asset=asset_key,
                          description="The snapshot's rows within the bounds of the table's last landed loads: no "
                          "drop of more than COMMOPS_VOLUME_MAX_DROP (20%) against their median (COMMOPS_VOLUME_NIGHTS, 7)"),
        dg.AssetCheckSpec(SCHEMA_DRIFT, asset=asset_key,
                          description="No field outside the spec (kept in _extra) that no earlier load of the "
                          "organization's table returned; new ones are named with their row counts"),
    ]
    if spec.product_refs:
        specs.append(dg.AssetCheckSpec(PRODUCT_REFS, asset=asset_key,
                                       description=f"Every product id referenced by {spec.table} exists in products"))
    return specs


def _scalar(conn: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0] or 0)


def _sample(conn: duckdb.DuckDBPyConnection, sql: str) -> str:
    return ", ".join(str(row[0]) for row in conn.execute(sql + " LIMIT 5").fetchall())


def run_snapshot_checks(
    conn: duckdb.DuckDBPyConnection, spec: ResourceSpec, relation: str, listing: ListingReport, *, suppressed: int = 0
) -> list[dg.AssetCheckResult]:
    """Checks over a snapshot; `relation` is a SQL table expression (e.g. read_parquet(...)); `suppressed`
    rows were listed by the API and left out on purpose (erased people): they count toward its total."""
    # One scan for the row count and every required column's NULLs.
    counts = conn.execute(
        "SELECT count(*)"
        + "".join(f", count(*) FILTER (WHERE t.{column} IS NULL)" for column in spec.required)
        + f" FROM {relation} AS t"
    ).fetchone()
    rows = int(counts[0])
    null_counts = dict(zip(spec.required, map(int, counts[1:]), strict=True))
    results = [_row_count_check(rows, listing, suppressed), _id_check(conn, spec, relation)]
    results.append(
        dg.AssetCheckResult(
            check_name=REQUIRED,
            passed=not any(null_counts.values()),
            severity=WARN,
            metadata={f"nulls_{column}": n for column, n in null_counts.items()},
        )
    )
    if spec.enums:
        bad = {}
        for expression, allowed in spec.enums.items():
            values = ", ".join(f"'{v}'" for v in allowed)
            bad[expression] = _sample(
                conn,
                f"SELECT DISTINCT t.{expression} FROM {relation} AS t "
                f"WHERE t.{expression} IS NOT NULL AND t.{expression} NOT IN ({values})",
            )
        results.append(
            dg.AssetCheckResult(
                check_name=ENUMS,
                passed=not any(bad.values()),
                severity=WARN,
                metadata={f"invalid_{k}": v or "none" for k, v in bad.items()},
            )
        )
    return results


def _row_count_check(rows: int, listing: ListingReport, suppressed: int = 0) -> dg.AssetCheckResult:
    """Fails only when a row present throughout the walk could be missing: a list the listing could not
    prove complete, or (a defence against a wrong proof) fewer rows than the API counted and not in flux."""
    passed = listing.complete and rows + suppressed + listing.unseen >= listing.api_total
    return dg.AssetCheckResult(
        check_name=ROW_COUNT,
        passed=passed,
        description=None if passed else listing.describe(),
        metadata={
            "rows": rows,
            "api_total": listing.api_total,
            "rows_suppressed": suppressed,
            "rows_in_flux": listing.in_flux_count,
            "rows_in_flux_sample": ", ".join(listing.in_flux_sample()) or "none",
            "rows_unseen": listing.unseen,
            **{f"proof {v.label}": v.proof or "not proven" for v in listing.lists},
        },
    )


def _id_check(conn: duckdb.DuckDBPyConnection, spec: ResourceSpec, relation: str, *,
              whole_ids: bool = False) -> dg.AssetCheckResult:
    """Unique and prefixed ids; with `whole_ids`, also spec ids whole (the warehouse's check: the snapshot's
    blocks the load, and a row with an odd id is kept, never fetched by its id, and flagged here)."""
    duplicates = _scalar(conn, f"SELECT count(*) - count(DISTINCT id) FROM {relation}")
    unprefixed = _sample(
        conn, f"SELECT id FROM {relation} WHERE id IS NULL OR NOT starts_with(id, '{spec.id_prefix}')"
    )
    metadata: dict[str, object] = {"duplicate_ids": duplicates, "unprefixed_ids": unprefixed or "none"}
    not_spec_ids = ""
    if whole_ids:
        not_spec_ids = _sample(conn, f"SELECT id FROM {relation} WHERE starts_with(id, '{spec.id_prefix}') "
                                     f"AND NOT regexp_full_match(id, {sql_literal(spec.id_pattern)})")
        metadata["not_spec_ids"] = not_spec_ids or "none"
    return dg.AssetCheckResult(
        check_name=IDS,
        passed=duplicates == 0 and not unprefixed and not not_spec_ids,
        severity=WARN if whole_ids else dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
    )


def run_warehouse_checks(
    conn: duckdb.DuckDBPyConnection, spec: ResourceSpec, snapshot_relation: str, org: str
) -> list[dg.AssetCheckResult]:
    """Checks of organization `org`'s rows of the table (product references within the same organization)."""
    mine = f"(SELECT * FROM {spec.table} WHERE org = {sql_literal(org)})"
    results = [_id_check(conn, spec, mine, whole_ids=True)]
    missing = _scalar(
        conn,
        f"SELECT count(*) FROM {snapshot_relation} AS s ANTI JOIN {mine} AS t ON t.id = s.id",
    )
    results.append(
        dg.AssetCheckResult(check_name=SNAPSHOT_IN_TABLE, passed=missing == 0, severity=WARN,
                            metadata={"missing_ids": missing})
    )
    if spec.product_refs and not _scalar(conn, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'products'"):
        results.append(dg.AssetCheckResult(check_name=PRODUCT_REFS, passed=False, severity=WARN,
                                           metadata={"reason": "table products does not exist yet: materialize warehouse/products"}))
    elif spec.product_refs:
        dangling_sql = (
            f"SELECT DISTINCT ref FROM (SELECT {spec.product_refs} AS ref FROM {mine} AS t) "
            f"WHERE ref IS NOT NULL AND ref NOT IN (SELECT id FROM products WHERE org = {sql_literal(org)})"
        )
        dangling = _scalar(conn, f"SELECT count(*) FROM ({dangling_sql})")
        results.append(
            dg.AssetCheckResult(
                check_name=PRODUCT_REFS,
                passed=dangling == 0,
                severity=WARN,
                metadata={"unknown_product_ids": dangling, "sample": _sample(conn, dangling_sql) or "none"},
            )
        )
    return results


def extra_fields(conn: duckdb.DuckDBPyConnection, spec: ResourceSpec, snapshot_relation: str) -> dict[str, int]:
    """Top-level fields of the snapshot's `_extra` the spec does not name (a named field there is a value that
    could not be read, counted as such), with the number of rows carrying each."""
    known = ", ".join(sql_literal(name) for name in spec.schema.names)
    return dict(conn.execute(
        f"SELECT field, count(*) FROM (SELECT unnest(json_keys(_extra)) AS field FROM {snapshot_relation} "
        f"WHERE _extra IS NOT NULL) WHERE field NOT IN ({known}) GROUP BY field ORDER BY field").fetchall())


def volume_check(rows: int, recent: list[int], *, max_drop: float, max_rise: float | None) -> dg.AssetCheckResult:
    """`rows` against the median of `recent` (the last landed loads' snapshot rows): passes without history."""
    metadata: dict[str, object] = {"rows": rows, "loads_compared": len(recent)}
    if not recent:
        return dg.AssetCheckResult(check_name=VOLUME, passed=True, severity=WARN,
                                   description="no earlier load to compare with yet", metadata=metadata)
    ordered = sorted(recent)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    low = median * (1 - max_drop)
    high = None if max_rise is None else median * (1 + max_rise)
    metadata |= {"median_recent": float(median), "lower_bound": round(low, 1)}
    if high is not None:
        metadata["upper_bound"] = round(high, 1)
    change = (rows - median) / median if median else 0.0
    metadata["change_vs_median"] = round(change, 4)
    passed = rows >= low and (high is None or rows <= high)
    description = None if passed else (
        f"{rows} rows against a median of {median:g} over the last {len(recent)} loads ({change:+.0%})")
    return dg.AssetCheckResult(check_name=VOLUME, passed=passed, severity=WARN, description=description,
                               metadata=metadata)


def schema_drift_check(extra: dict[str, int], seen: set[str]) -> tuple[dg.AssetCheckResult, dict[str, int]]:
    """Fails (WARN) when a field outside the spec appears that no earlier load returned; with the new ones."""
    new = {name: count for name, count in extra.items() if name not in seen}
    description = None if not new else "new fields outside the spec: " + ", ".join(
        f"{name} ({count} rows)" for name, count in new.items())
    result = dg.AssetCheckResult(
        check_name=SCHEMA_DRIFT, passed=not new, severity=WARN, description=description,
        metadata={"new_fields": dg.MetadataValue.json(new), "extra_fields": dg.MetadataValue.json(extra)})
    return result, new
