"""Typed results travel as materialization metadata (resources/metadata_record.py): what an asset
reports with `as_metadata()` is stored by Dagster under the keys the UI shows, and `from_metadata()`
rebuilds the same record from Dagster's event log."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from assets.metadata import SyncStats
from crm.reconcile import ReconciliationResult
from crm.tables import STATUSES
from resources.commops_api import RequestStats

RECONCILED = ReconciliationResult(
    run_id="not-in-the-metadata",
    reconciled_at=datetime(2026, 3, 1, 4, 5, 6, tzinfo=UTC),
    source="csv contacts.csv",
    kols=7,
    contacts=9,
    counts={status: n for n, status in enumerate(STATUSES)},
    needs_review=2,
    duplicate_sets=1,
    report_html=Path("/data/reports/reconciliation/latest.html"),
    report_csv=Path("/data/reports/reconciliation/latest.csv"),
    duration_seconds=1.23456,
)
SPENT = RequestStats(requests=12, retries=1, rate_limited=3, throttled_seconds=2.0004, pages=11)


def _stored_metadata(tmp_path: Path) -> dict:
    """The metadata of one materialization reporting both records, read back from a SQLite instance."""

    @dg.asset
    def reporting() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={**RECONCILED.as_metadata(), **SPENT.as_metadata()})

    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        assert dg.materialize([reporting], instance=instance).success
        event = instance.get_latest_materialization_event(dg.AssetKey("reporting"))
        return dict(event.asset_materialization.metadata)


def test_records_read_back_from_dagsters_event_log_as_they_were_reported(tmp_path: Path) -> None:
    stored = _stored_metadata(tmp_path)

    assert ReconciliationResult.from_metadata(stored, run_id=RECONCILED.run_id) == replace(
        RECONCILED, duration_seconds=1.235  # reported to the millisecond
    )
    assert RequestStats.from_metadata(stored) == RequestStats(12, 1, 3, 2.0, pages=0)  # pages are not reported


def test_records_are_stored_under_the_keys_the_ui_shows(tmp_path: Path) -> None:
    stored = _stored_metadata(tmp_path)

    assert stored["rate_limited_429s"] == dg.IntMetadataValue(3)
    assert stored["report_html"] == dg.PathMetadataValue("/data/reports/reconciliation/latest.html")
    assert stored["throttled_seconds"] == dg.FloatMetadataValue(2.0)
    assert {status: stored[status] for status in STATUSES} == {  # each status its own entry, to plot
        status: dg.IntMetadataValue(n) for n, status in enumerate(STATUSES)
    }
    assert not {"run_id", "pages", "rate_limited", "counts"} & stored.keys()


def test_a_record_the_metadata_does_not_carry_reads_as_none() -> None:
    merged_table = {"dagster/row_count": dg.IntMetadataValue(40), "rows_written": dg.IntMetadataValue(3)}

    assert RequestStats.from_metadata(merged_table) is None
    assert SyncStats.from_metadata(merged_table) == SyncStats(rows=40)


def test_a_record_reads_by_its_metadata_keys_as_the_ui_shows_them() -> None:
    assert (SPENT["rate_limited_429s"], SPENT["throttled_seconds"]) == (3, 2.0)
    assert RECONCILED["report_csv"] == Path("/data/reports/reconciliation/latest.csv")
