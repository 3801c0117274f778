"""The spec's timestamps (part 2.1: "All timestamps are ISO 8601 strings"), read one way everywhere.

Every ISO 8601 form is read: a `Z` or a numeric offset (`+02:00`, `+0200`, `+02`), fractions of a
second (any number of digits; beyond microseconds truncated), basic and extended formats, week and
ordinal dates, `24:00`, a lower-case `t` or `z`, a space instead of `T`, and a calendar date alone
(midnight). A timestamp without a zone designator is UTC (docs/spec-decisions.md, "Timestamps without
a zone designator"). Values come back as aware datetimes in UTC.

The pipeline and the receiver read timestamps through this module; the service writes them with
`format_timestamp`.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

# The one text form this project writes: ISO 8601, UTC, microseconds, `Z`.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

_ORDINAL = re.compile(r"^(\d{4})-?(\d{3})(?=$|T)")
_MIDNIGHT_END = re.compile(r"T24(:?00(:?00([.,]0+)?)?)?(?=$|Z|[+-])")


class UnreadableTimestamp(ValueError):
    """A value that is present but is not an ISO 8601 timestamp."""


def parse_timestamp(value: Any) -> datetime:
    """`value` (an ISO 8601 string) as an aware UTC datetime; UnreadableTimestamp when it is not one."""
    if not isinstance(value, str):
        raise UnreadableTimestamp(f"expected an ISO 8601 string, got {type(value).__name__} {value!r:.60}")
    text = value.strip().upper()
    if len(text) > 10 and text[10] == " ":
        text = f"{text[:10]}T{text[11:]}"
    text, next_day = _without_end_of_day(_without_ordinal(text))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UnreadableTimestamp(f"not an ISO 8601 timestamp: {value!r:.60}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC) + (timedelta(days=1) if next_day else timedelta())


def read_timestamp(value: Any) -> datetime | None:
    """Like parse_timestamp, but None for None (an absent value is not an unreadable one)."""
    return None if value is None else parse_timestamp(value)


def format_timestamp(moment: datetime) -> str:
    """`moment` in the project's text form (UTC, microseconds, `Z`); a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def utc_now() -> str:
    """Now, in the project's text form."""
    return format_timestamp(datetime.now(UTC))


def _without_ordinal(text: str) -> str:
    """`2026-326T...` (year and day of year) as a calendar date; Python reads every other date form."""
    match = _ORDINAL.match(text)
    if match is None:
        return text
    year, day = int(match.group(1)), int(match.group(2))
    if not 1 <= day <= (366 if _leap(year) else 365):
        return text  # left for fromisoformat to refuse
    calendar = date(year, 1, 1) + timedelta(days=day - 1)
    return calendar.isoformat() + text[match.end() :]


def _without_end_of_day(text: str) -> tuple[str, bool]:
    """`T24:00[:00]` (the end of a day) as `T00:00` of the next day."""
    match = _MIDNIGHT_END.search(text)
    if match is None:
        return text, False
    return text[: match.start()] + "T00:00:00" + text[match.end() :], True


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
