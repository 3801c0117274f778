"""The current-state tables as Apache Iceberg tables on the object store, for readers on other machines.

Beside analytics.duckdb (the default, unchanged): with COMMOPS_ICEBERG_CATALOG_URL (a SQL catalog,
postgresql://...) and COMMOPS_ICEBERG_WAREHOUSE (s3://bucket/prefix) set, every publish of
analytics.duckdb also merges its current-state tables into Iceberg tables of the namespace
COMMOPS_ICEBERG_NAMESPACE (pyiceberg's SqlCatalog; data files through pyarrow's S3 filesystem, which
takes credentials from the AWS SDK's chain). Unset, the resource does nothing.

The rule is the warehouse's: per (org, key) the newer version wins (`spec.version`, field by field,
`_not_older`), so a publish never replaces a newer row with an older one, whichever machine's warehouse
it comes from; a row the Iceberg table already holds with the same content (digest and version, not
the stamps a night moves: _snapshot_date, receipt times) is not rewritten, so the stamps in Iceberg are
those of the version written. A table's publish is one Iceberg commit of one snapshot (the winners
appended, the rows they replace deleted by position: resources/iceberg_deletes.py); the catalog accepts it only if the
table is still at the snapshot the winners were computed against, so two writers never lose each other's
rows: the loser recomputes against the new snapshot and commits again. Readers are never blocked: they
read the snapshot current when they start (immutable files), whatever commits meanwhile.

Child tables have no version of their own: they are rewritten for the parents written, before the parents,
so a publish that fails between the two is completed by the next one.

pyiceberg and SQLAlchemy are imported where they are used: every run loads this module with the code
location, and a run that publishes nowhere (COMMOPS_ICEBERG_* unset) does not carry their ~30 MB.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import duckdb
import pyarrow as pa
from pydantic import PrivateAttr

from resources.object_store import S3Location, endpoint_url, region
from resources.settings import ICEBERG_CATALOG_URL_ENV, ICEBERG_WAREHOUSE_ENV, SettingsError
from resources.sql import sql_literal
from resources.iceberg_deletes import COMPACT_SHARE, commit_files, data_files, find_positions, live_files, write_delete_files
from resources.warehouse import DIGEST_COLUMN, ORG_COLUMN, TableSpec, _not_older, receipt_columns
from resources.postgres_urls import masked

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

COMMIT_ATTEMPTS = 5  # another writer committed between our read and our commit: recompute, try again
# pyiceberg's own retry re-applies the same delete and append on top of the other writer's commit, which
# would add a row twice or put back an older one: off, so a conflict comes back here to be recomputed.
TABLE_PROPERTIES = {"commit.retry.num-retries": "0"}
BATCH_ROWS = 50_000  # rows per batch read from analytics.duckdb: bounds a publish's memory
# The object store's timeouts, as the lake's (resources/object_store.py): the SDK's default gives up on a
# response that stalls for 3 s, which a loaded S3-compatible server does.
S3_TIMEOUTS = {"s3.connect-timeout": "10", "s3.request-timeout": "60"}
# DuckDB types Iceberg lacks, as the published column carries them.
ICEBERG_CASTS = {"JSON": "VARCHAR", "UBIGINT": "DECIMAL(20, 0)"}


@dataclass(frozen=True)
class Published:
    """What one table's publish wrote."""

    table: str
    rows_written: int  # data rows: the rows written, and the live rows of a rewrite
    deletes_written: int  # rows the position-delete files written delete
    rewritten: bool  # the table rewritten whole (its delete files held too many rows)
    rows: int
    attempts: int


class IcebergResource(dg.ConfigurableResource):
    """The Iceberg catalog (SQL, e.g. on Postgres) and warehouse location; both unset: publishing is off."""

    catalog_url: str | None = None  # a dg.EnvVar (it may hold a password)
    warehouse: str | None = None  # s3://bucket/prefix
    namespace: str = "commops"
    _catalog: Catalog | None = PrivateAttr(default=None)

    @property
    def enabled(self) -> bool:
        return bool(self.catalog_url or self.warehouse)

    def catalog(self) -> Catalog:
        """The SQL catalog (created on first use; its tables are made in the database if missing)."""
        if self._catalog is None:
            self._catalog = open_catalog(self.catalog_url, self.warehouse)
            self._catalog.create_namespace_if_not_exists(self.namespace)
        return self._catalog

    def publish(self, analytics_path: Path, specs: Sequence[TableSpec], log: Any = None) -> list[Published]:
        """Merge the current-state tables of the published analytics.duckdb into their Iceberg tables
        (those it holds; a table not there yet is skipped). [] when publishing is off."""
        if not self.enabled:
            return []
        catalog = self.catalog()
        published = []
        with _reader(analytics_path) as conn:
            for spec in specs:
                if not _exists(conn, spec.table):
                    continue
                for result in _publish_table(conn, catalog, self.namespace, spec):
                    published.append(result)
                    if log is not None:
                        log.info(f"iceberg {self.namespace}.{result.table}: {result.rows_written} rows written, "
                                 f"{result.deletes_written} deleted by position"
                                 f"{', table rewritten' if result.rewritten else ''}, {result.rows} rows")
        return published


def open_catalog(catalog_url: str | None, warehouse: str | None) -> Catalog:
    """pyiceberg's SqlCatalog for the settings; SettingsError naming the variable when one is missing or invalid.
    A bare postgresql:// means psycopg2 here (SQLAlchemy 2.1 would take it for psycopg 3, not installed)."""
    if not catalog_url or not warehouse:
        missing = ICEBERG_CATALOG_URL_ENV if not catalog_url else ICEBERG_WAREHOUSE_ENV
        raise SettingsError(
            f"{missing} is not set: the Iceberg tables need both {ICEBERG_CATALOG_URL_ENV} and {ICEBERG_WAREHOUSE_ENV}"
        )
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(catalog_url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise SettingsError(f"{ICEBERG_CATALOG_URL_ENV} is not a database URL (postgresql://USER:PASSWORD@HOST/DB)") from None
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg2")
    location = S3Location.parse(warehouse, ICEBERG_WAREHOUSE_ENV)
    properties = {"uri": url.render_as_string(hide_password=False), "warehouse": location.url, "s3.region": region(),
                  **S3_TIMEOUTS}
    if endpoint_url():
        properties["s3.endpoint"] = endpoint_url()
    try:
        return SqlCatalog("commops", **properties)
    except Exception as error:  # the driver's own message, on one line, without the password
        reason = masked(str(error).strip().splitlines()[0], catalog_url) if str(error).strip() else type(error).__name__
        raise SettingsError(
            f"{ICEBERG_CATALOG_URL_ENV}={url.render_as_string(hide_password=True)}: catalog unreachable ({reason})"
        ) from None


def _publish_table(conn: duckdb.DuckDBPyConnection, catalog: Catalog, namespace: str, spec: TableSpec) -> list[Published]:
    """The table's publish and its child tables' (children first, as committed)."""
    from pyiceberg.exceptions import CommitFailedException

    identifier = f"{namespace}.{spec.table}"
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        table = _table(catalog, identifier, conn, spec.table)
        try:
            if not _winners(conn, table, spec):
                return [Published(name, 0, 0, False, _count(conn, name), attempt)
                        for name in (*(child.name for child in spec.children), spec.table)]
            published = []
            for child in spec.children:  # a replaced parent's old children go, a new parent has none
                child_table = _table(catalog, f"{namespace}.{child.name}", conn, child.name)
                written = _write(child_table, conn, child.name, child.parent_key, "SELECT org, id FROM _winners")
                published.append(Published(child.name, *written, _count(conn, child.name), attempt))
            written = _write(table, conn, spec.table, spec.key, "SELECT org, id FROM _winners WHERE replaces")
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS:
                raise
            time.sleep(0.05 * attempt)
            continue
        finally:
            conn.execute("DROP TABLE IF EXISTS _winners; DROP TABLE IF EXISTS _positions")
        return [*published, Published(spec.table, *written, _count(conn, spec.table), attempt)]
    raise AssertionError("unreachable")


def _winners(conn: duckdb.DuckDBPyConnection, table: Any, spec: TableSpec) -> int:
    """TEMP TABLE _winners (org, id, replaces): the rows of analytics.duckdb to write, newer than (or
    missing from) the Iceberg table's version of them and not already there with the same content; their count."""
    key, version = spec.key, tuple(spec.version)
    # Content, not stamps: a row seen again moves its receipt times (`_fetched_at`, a version field too)
    # and its _snapshot_date in analytics.duckdb, not in Iceberg (docs/analysts.md).
    content = dict.fromkeys([DIGEST_COLUMN, *(v for v in version if v not in receipt_columns(spec))])
    existing = table.scan(selected_fields=tuple(dict.fromkeys([ORG_COLUMN, key, *version, *content]))).to_arrow()
    conn.register("_existing", existing)
    try:
        differs = " OR ".join(f"{_as_published('w', c)} IS DISTINCT FROM e.{c}" for c in content)
        conn.execute(
            f"CREATE OR REPLACE TEMP TABLE _winners AS SELECT w.{ORG_COLUMN} AS org, w.{key} AS id, "
            f"e.{key} IS NOT NULL AS replaces FROM a.{spec.table} w LEFT JOIN _existing e "
            f"ON e.{ORG_COLUMN} = w.{ORG_COLUMN} AND e.{key} = w.{key} "
            f"WHERE e.{key} IS NULL OR ({_not_older(version, 'w', 'e')} AND ({differs}))"
        )
    finally:
        conn.unregister("_existing")
    return conn.execute("SELECT count(*) FROM _winners").fetchall()[0][0]


def _write(table: Any, conn: duckdb.DuckDBPyConnection, name: str, key: str, replaced: str) -> tuple[int, int, bool]:
    """One commit of one snapshot: the winners' rows of `name` (its rows whose `key` is a winner's id)
    appended, the table's rows whose (org, key) is in the SQL `replaced` deleted: by position-delete files,
    or by rewriting the table when delete files would hold more than COMPACT_SHARE of its rows. (data rows
    written, rows the new delete files delete, whether the table was rewritten)."""
    files = live_files(table)
    deletes = find_positions(conn, table, files, key, replaced) if files.tasks else 0
    rewrite = files.deleted + deletes > COMPACT_SHARE * files.rows
    rows = conn.sql(
        f"SELECT {_select_list(conn, name)} FROM a.{name} t "
        f"WHERE ({ORG_COLUMN}, {key}) IN (SELECT (org, id) FROM _winners)"
    ).to_arrow_reader(BATCH_ROWS)
    with table.transaction() as transaction:
        added = data_files(transaction, rows)
        if rewrite:  # the live rows not replaced, into new files
            conn.register("_live", table.scan().to_arrow_batch_reader())
            try:
                added += data_files(transaction, conn.sql(
                    f"SELECT l.* FROM _live l ANTI JOIN ({replaced}) r ON r.org = l.{ORG_COLUMN} AND r.id = l.{key}"
                ).to_arrow_reader(BATCH_ROWS))
            finally:
                conn.unregister("_live")
        written = sum(f.record_count for f in added)
        if deletes and not rewrite:
            added += write_delete_files(conn, table, files)
        if added or rewrite:
            commit_files(transaction, added, rewrite=rewrite)
    return written, 0 if rewrite else deletes, rewrite


def _table(catalog: Catalog, identifier: str, conn: duckdb.DuckDBPyConnection, name: str) -> Any:
    """The Iceberg table `identifier`, created from analytics.duckdb's table `name` if missing; columns the
    warehouse gained since are added (union by name)."""
    from pyiceberg.exceptions import NoSuchTableError

    schema = conn.sql(f"SELECT {_select_list(conn, name)} FROM a.{name} LIMIT 0").to_arrow_table().schema
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        return catalog.create_table_if_not_exists(identifier, schema=schema, properties=TABLE_PROPERTIES)
    if any(table.properties.get(name) != value for name, value in TABLE_PROPERTIES.items()):
        with table.transaction() as transaction:
            transaction.set_properties(TABLE_PROPERTIES)
    if set(schema.names) - set(table.schema().column_names):
        with table.update_schema() as update:
            update.union_by_name(schema)
    return table


def _select_list(conn: duckdb.DuckDBPyConnection, name: str) -> str:
    """analytics.duckdb's columns of `name`, those of a type Iceberg lacks cast (ICEBERG_CASTS)."""
    columns = conn.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'a' AND table_name = ? "
        "ORDER BY column_index",
        [name],
    ).fetchall()
    return ", ".join(
        f'"{column}"::{ICEBERG_CASTS[type_]} AS "{column}"' if type_ in ICEBERG_CASTS else f'"{column}"'
        for column, type_ in columns
    )


def _as_published(alias: str, column: str) -> str:
    """SQL: analytics.duckdb's `column` of the row aliased `alias` as the Iceberg table has it (the digest)."""
    return f"{alias}.{column}::{ICEBERG_CASTS['UBIGINT']}" if column == DIGEST_COLUMN else f"{alias}.{column}"


def _count(conn: duckdb.DuckDBPyConnection, name: str) -> int:
    return conn.execute(f"SELECT count(*) FROM a.{name}").fetchall()[0][0]


def _exists(conn: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = 'a' AND table_name = ?", [name]
    ).fetchall()[0][0])


@contextmanager
def _reader(analytics_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB with analytics.duckdb attached read-only as `a`."""
    conn = duckdb.connect(config={"memory_limit": "256MB", "threads": 2})
    try:
        conn.execute(f"ATTACH {sql_literal(str(analytics_path))} AS a (READ_ONLY)")
        yield conn
    finally:
        conn.close()
