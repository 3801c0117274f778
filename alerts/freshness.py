"""Freshness per organization: each warehouse table of each organization is due by the nightly schedule
(02:00, COMMOPS_TIMEZONE) plus COMMOPS_FRESHNESS_HOURS (2 h); COMMOPS_FRESHNESS_<TABLE>_HOURS sets one
table's own (e.g. COMMOPS_FRESHNESS_KOL_DETAILS_HOURS=6).

Judged per organization from the Dagster instance, each table's latest materialization of that
organization's partition ("data as of"): Dagster's own freshness is per asset, where one organization's
fresh partition would hide another's stale one. A table never loaded for an organization is shown as such
by `commops status`, and not alerted on (an organization being set up has no data yet).

The same deadline goes on the assets as Dagster's own FreshnessPolicy (`dagster_policy`), per asset, so the
UI shows it; Dagster's policy takes a window of at most 24 h, so a longer setting shows there as 24 h."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import dagster as dg

from resources.settings import SettingsError

NIGHTLY_HOUR = 2  # pipelines/schedules.py: "0 2 * * *"
DEFAULT_HOURS = 2.0
HOURS_ENV = "COMMOPS_FRESHNESS_HOURS"


def hours_allowed(table: str, environment: dict[str, str] | None = None) -> float:
    environment = os.environ if environment is None else environment
    for name in (f"COMMOPS_FRESHNESS_{table.upper()}_HOURS", HOURS_ENV):
        value = environment.get(name)
        if value:
            try:
                hours = float(value)
            except ValueError:
                raise SettingsError(f"{name}={value!r} is not a number of hours") from None
            if hours < 0:
                raise SettingsError(f"{name}={value!r} must not be negative")
            return hours
    return DEFAULT_HOURS


def dagster_policy(table: str, timezone: str, environment: dict[str, str] | None = None) -> dg.FreshnessPolicy:
    """Dagster's FreshnessPolicy of the same deadline: loaded between the nightly run and its deadline
    (Dagster needs a window of 1 minute to 24 hours)."""
    return _cron_policy(min(max(round(hours_allowed(table, environment) * 60), 1), 24 * 60), timezone)


@cache  # a policy computes its cron's ticks when made: once per process, not per run's Definitions
def _cron_policy(minutes: int, timezone: str) -> dg.FreshnessPolicy:
    deadline = NIGHTLY_HOUR * 60 + minutes
    return dg.FreshnessPolicy.cron(deadline_cron=f"{deadline % 60} {deadline // 60 % 24} * * *",
                                   lower_bound_delta=timedelta(minutes=minutes), timezone=timezone)


def due_since(now: datetime, timezone: str, hours: float) -> tuple[datetime, datetime]:
    """(the nightly run a table must have been loaded by, its deadline): the latest 02:00 whose deadline
    (02:00 + `hours`) has passed at `now`."""
    local = now.astimezone(ZoneInfo(timezone))
    tick = local.replace(hour=NIGHTLY_HOUR, minute=0, second=0, microsecond=0)
    while tick + timedelta(hours=hours) > local:
        tick -= timedelta(days=1)
    return tick.astimezone(UTC), (tick + timedelta(hours=hours)).astimezone(UTC)


@dataclass(frozen=True)
class Freshness:
    org: str
    table: str
    as_of: datetime | None  # the latest load of the organization's rows; None: never loaded
    due_from: datetime  # a load at or after this is fresh
    deadline: datetime

    @property
    def stale(self) -> bool:
        return self.as_of is not None and self.as_of < self.due_from

    def describe(self) -> str:
        if self.as_of is None:
            return "never loaded"
        when = self.as_of.strftime("%Y-%m-%d %H:%M UTC")
        if not self.stale:
            return f"data as of {when}"
        return (f"data as of {when}, due by {self.deadline.strftime('%Y-%m-%d %H:%M UTC')} "
                f"(the {self.due_from.strftime('%H:%M UTC')} nightly run + {hours_between(self):g} h)")


def hours_between(freshness: Freshness) -> float:
    return (freshness.deadline - freshness.due_from).total_seconds() / 3600


def last_loaded(instance: dg.DagsterInstance, asset: dg.AssetKey, org: str) -> datetime | None:
    """When the organization's partition of `asset` was last materialized."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[org]), limit=1).records
    return datetime.fromtimestamp(records[0].timestamp, UTC) if records else None


def judge(instance: dg.DagsterInstance, org: str, tables: list[str], timezone: str,
          now: datetime | None = None) -> list[Freshness]:
    now = now or datetime.now(UTC)
    judged = []
    for table in tables:
        due_from, deadline = due_since(now, timezone, hours_allowed(table))
        as_of = last_loaded(instance, dg.AssetKey(["warehouse", table]), org)
        judged.append(Freshness(org, table, as_of, due_from, deadline))
    return judged
