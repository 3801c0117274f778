"""The daily partitioning shared by every asset: one partition per snapshot date."""

from __future__ import annotations

import dagster as dg

from resources import settings

# end_offset=1: today's partition exists, so the 02:00 run snapshots "today" (the date the
# data was read), and `commops sync` without --date does the same.
DAILY = dg.DailyPartitionsDefinition(
    start_date=settings.start_date(),
    timezone=settings.timezone(),
    end_offset=1,
)
