"""The snapshot date of a run: the date, in COMMOPS_TIMEZONE, on which the run was created.

The API serves only the present, so a snapshot can only be dated the day it is read. Assets are
not partitioned (a partitioned asset invites backfills that would file today's data under past
dates); every asset of a run reads the date from the run's creation time, so a run that crosses
midnight still writes one snapshot date throughout.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import dagster as dg

from resources.settings import load_settings


def today() -> str:
    return datetime.now(ZoneInfo(load_settings().timezone)).strftime("%Y-%m-%d")


def snapshot_date(context: dg.AssetExecutionContext) -> str:
    return run_snapshot_date(context.instance, context.run.run_id)


def run_snapshot_date(instance: dg.DagsterInstance, run_id: str) -> str:
    record = instance.get_run_record_by_id(run_id)
    created = record.create_timestamp if record is not None else datetime.now(ZoneInfo("UTC"))
    return created.astimezone(ZoneInfo(load_settings().timezone)).strftime("%Y-%m-%d")
