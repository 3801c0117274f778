"""The snapshot date of a run: the date, in COMMOPS_TIMEZONE, on which the run was created.

The API serves only the present, so a snapshot can only be dated the day it is read. Assets are
not partitioned (a partitioned asset invites backfills that would file today's data under past
dates); every asset of a run reads the date from the run's creation time, so a run that crosses
midnight still writes one snapshot date throughout.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from resources.settings import load_settings

if TYPE_CHECKING:
    import dagster as dg


def today() -> str:
    return datetime.now(ZoneInfo(load_settings().timezone)).strftime("%Y-%m-%d")


def snapshot_date(context: dg.AssetExecutionContext) -> str:
    return run_snapshot_date(context.instance, context.run.run_id)


def run_snapshot_date(instance: dg.DagsterInstance, run_id: str) -> str:
    dated = _RUN_DATES.get(run_id)
    if dated is None:
        record = instance.get_run_record_by_id(run_id)
        if record is None:
            return today()
        dated = record.create_timestamp.astimezone(ZoneInfo(load_settings().timezone)).strftime("%Y-%m-%d")
        with _RUN_DATES_LOCK:
            _RUN_DATES[run_id] = dated
            if len(_RUN_DATES) > 256:  # a long-lived process (the events follower) runs many
                del _RUN_DATES[next(iter(_RUN_DATES))]
    return dated


# A run's date never changes: every step of a run asks for it, and each ask read the run storage and the settings
# (about 7 ms, a dozen times a run).
_RUN_DATES: dict[str, str] = {}
_RUN_DATES_LOCK = threading.Lock()
