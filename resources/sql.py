"""Small SQL text helpers for the DuckDB statements the lake and the warehouse build."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb


def sql_literal(text: str) -> str:
    """A SQL string literal (quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def read_parquet(path: str | Path) -> str:
    """A table expression over one Parquet file, without hive partition columns from its path."""
    return f"read_parquet({sql_literal(str(path))}, hive_partitioning = false)"


def cursor(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of `conn` (its own result, the same database instance) on `conn`'s current database: a cursor
    starts on the connection's default one, and a warehouse session's is the attached file (resources/warehouse.py)."""
    database = conn.execute("SELECT current_database()").fetchall()[0][0]
    own = conn.cursor()
    own.execute(f'USE "{database}"')
    return own


def has_table(conn: duckdb.DuckDBPyConnection, database: str, table: str) -> bool:
    """Whether the attached database `database` holds `table`."""
    return bool(conn.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = ?",
                             [database, table]).fetchall()[0][0])


@contextmanager
def transaction(conn: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """One DuckDB transaction around the block: committed at its end, rolled back if it raises."""
    conn.execute("BEGIN TRANSACTION")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
