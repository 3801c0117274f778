"""Every ISO 8601 form the spec allows is read the same way (commops_spec.timestamps)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from commops_spec.timestamps import UnreadableTimestamp, format_timestamp, parse_timestamp, read_timestamp

TEN = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22T10:00:00Z", TEN),
        ("2026-11-22T10:00:00", TEN),  # no zone designator: UTC (docs/spec-decisions.md)
        ("2026-11-22T12:00:00+02:00", TEN),
        ("2026-11-22T12:00:00+0200", TEN),
        ("2026-11-22T05:00:00-05", TEN),
        ("2026-11-22T10:00:00.250Z", TEN.replace(microsecond=250_000)),
        ("2026-11-22T10:00:00,25Z", TEN.replace(microsecond=250_000)),
        ("2026-11-22T10:00:00.123456789Z", TEN.replace(microsecond=123_456)),
        ("20261122T100000Z", TEN),
        ("2026-11-22t10:00:00z", TEN),
        ("2026-11-22 10:00:00Z", TEN),
        ("2026-11-22T10:00", TEN),
        ("2026-W47-7T10:00:00Z", TEN),
        ("2026-326T10:00:00Z", TEN),
        ("2026-11-21T24:00:00Z", datetime(2026, 11, 22, tzinfo=UTC)),
        ("2026-11-22", datetime(2026, 11, 22, tzinfo=UTC)),
    ],
)
def test_every_iso_8601_form_reads_as_the_same_utc_moment(text, expected):
    assert parse_timestamp(text) == expected
    assert parse_timestamp(text).tzinfo is UTC


@pytest.mark.parametrize("value", ["yesterday", "", "2026-13-01T00:00:00Z", "2026-366", 1732269600, ["2026-11-22"]])
def test_a_value_that_is_not_a_timestamp_is_refused_with_the_value_named(value):
    with pytest.raises(UnreadableTimestamp, match="ISO 8601"):
        parse_timestamp(value)


def test_absent_is_not_unreadable():
    assert read_timestamp(None) is None


def test_the_project_writes_one_form_that_reads_back_exactly():
    moment = TEN.replace(microsecond=7)
    assert format_timestamp(moment) == "2026-11-22T10:00:00.000007Z"
    assert parse_timestamp(format_timestamp(moment)) == moment
