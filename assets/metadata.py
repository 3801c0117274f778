"""Metadata shared by the assets: the sync's figures, listings, column profiles (no values), column schemas, catalog references."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pyarrow as pa

from sync import catalog
from sync.catalog import ResourceSpec
from resources.commops_api import ListingReport
from resources.metadata_record import ROW_COUNT, MetadataRecord, reported_as
from resources.warehouse import LOAD_COLUMNS, column_type, description


@dataclass(frozen=True)
class SyncStats(MetadataRecord):
    """What a sync asset reports of its run besides its requests (RequestStats), as `commops sync`
    summarises it; None where the asset has no such figure."""

    rows: int | None = reported_as(ROW_COUNT, default=None)
    duration_seconds: float | None = None
    rows_in_flux: int | None = None  # a listing's: created or archived while its lists were paged
    details_fetched: int | None = None  # KOL details fetched by this run
    pending_remaining: int | None = None  # KOL details left for the next runs


_MAX_IDS_IN_METADATA = 1_000


def listing_metadata(report: ListingReport) -> dict[str, Any]:
    """What a listing proved, and the rows in flux (created or archived while its lists were paged; their
    count is in SyncStats): numbers to plot, a sample to look up, and the whole account in words."""
    return {
        "complete": report.complete,
        "rows_in_flux_sample": ", ".join(report.in_flux_sample()) or "none",
        "rows_unseen": report.unseen,
        "rows_gone": len(report.gone),
        "rows_moved_between_lists": len(report.moved),
        "repair_passes": sum(v.passes for v in report.lists) - len(report.lists),
        "lookups": report.looked_up,
        "rows_in_flux_ids": dg.MetadataValue.json(report.in_flux_ids()[:_MAX_IDS_IN_METADATA]),
        "listing_started_at": report.started_at.isoformat() if report.started_at else "",
        "listing_ended_at": report.ended_at.isoformat() if report.ended_at else "",
        "listing": dg.MetadataValue.md(report.describe()),
    }


def markdown_profile(conn: duckdb.DuckDBPyConnection, relation: str, columns: list[str]) -> str:
    """Each column's row, non-null and distinct counts as a markdown table: what a run wrote, without a
    single value of it (KOLs are physicians: their names and contacts stay out of Dagster's event storage)."""
    counts = ", ".join(f'count("{c}"), approx_count_distinct("{c}")' for c in columns)
    row = conn.execute(f"SELECT count(*), {counts} FROM {relation}").fetchone()
    lines = ["| column | rows | non-null | distinct (approx.) |", "|---|---:|---:|---:|"]
    lines += [f"| {c} | {row[0]} | {row[1 + 2 * i]} | {row[2 + 2 * i]} |" for i, c in enumerate(columns)]
    return "\n".join(lines)


def column_schema(schema: pa.Schema, *, warehouse: bool = False) -> dict[str, Any]:
    """`dagster/column_schema` from an Arrow schema and its field descriptions (warehouse tables add
    the load columns), so the UI shows every column with its type and meaning."""
    columns = [
        dg.TableColumn(name=f.name, type=column_type(f) if warehouse else str(f.type), description=description(f) or None)
        for f in schema
    ]
    if warehouse:
        columns += [dg.TableColumn(name=name, type=type_, description=text) for name, type_, text in LOAD_COLUMNS]
    return {"dagster/column_schema": dg.TableSchema(columns=columns)}


def catalog_reference(spec: ResourceSpec) -> dict[str, Any]:
    """`dagster/code_references` pointing at the resource's entry in sync/catalog.py (the assets
    themselves come from one factory, whose source says little about a given resource)."""
    path = Path(catalog.__file__).resolve()
    line = next(
        (number for number, text in enumerate(path.read_text().splitlines(), 1) if f'name="{spec.name}",' in text),
        None,
    )
    with warnings.catch_warnings():  # code references are a beta API of Dagster 1.13; the UI shows them
        warnings.simplefilter("ignore", dg.BetaWarning)
        reference = dg.LocalFileCodeReference(file_path=str(path), line_number=line, label=f"catalog entry: {spec.name}")
        return {"dagster/code_references": dg.CodeReferencesMetadataValue(code_references=[reference])}
