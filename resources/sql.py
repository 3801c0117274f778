"""Small SQL text helpers for the DuckDB statements the lake and the warehouse build."""

from __future__ import annotations

from pathlib import Path


def sql_literal(text: str) -> str:
    """A SQL string literal (quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def read_parquet(path: str | Path) -> str:
    """A table expression over one Parquet file, without hive partition columns from its path."""
    return f"read_parquet({sql_literal(str(path))}, hive_partitioning = false)"
