"""Who applies the inbox's events: `commops events follow` while it runs, else `webhook_events_sensor`.

The follower is a long-lived process that runs `apply_webhook_events` in itself as soon as an event is
pending, with no sensor tick and no process start per batch. It beats in the Dagster instance's key-value
store (the deployment's Postgres), every BEAT_SECONDS, under FOLLOWER_KEY: its name and a counter. The
sensor stands down while the counter moves; when it has not moved for STALE_SECONDS of the sensor's own
clock (so no two hosts' clocks are compared), the follower is gone: the sensor fails the runs it left
unfinished (so their events are no longer held in flight) and takes over. A follower that comes back, or
a second one, takes the lease only once the holder's beat is stale.

Safety does not rest on the lease: the inbox's claims (resources/inbox) give each event to one run at a
time, so the rare overlap of a handover only costs a run that finds its events taken.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

import dagster as dg

FOLLOWER_KEY = "commops/events_follower"
FOLLOWER_TAG = "commops/follower"  # on every run a follower made: its name
BEAT_SECONDS = 2.0
STALE_SECONDS = 20.0
_UNFINISHED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED]


@dataclass(frozen=True)
class Beat:
    follower: str  # host:pid
    count: int

    @property
    def token(self) -> str:
        return f"{self.follower}#{self.count}"


def follower_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def read_beat(instance: dg.DagsterInstance) -> Beat | None:
    raw = instance.daemon_cursor_storage.get_cursor_values({FOLLOWER_KEY}).get(FOLLOWER_KEY)
    try:
        value = json.loads(raw) if raw else None
        return Beat(str(value["follower"]), int(value["count"])) if value else None
    except (ValueError, KeyError, TypeError):
        return None


def write_beat(instance: dg.DagsterInstance, beat: Beat | None) -> None:
    value = json.dumps({"follower": beat.follower, "count": beat.count}) if beat else ""
    instance.daemon_cursor_storage.set_cursor_values({FOLLOWER_KEY: value})


@dataclass(frozen=True)
class Watch:
    """What an observer last saw of the beat, by its own clock: a beat is alive while its token moved
    within STALE_SECONDS. Kept by the sensor in its cursor, by a standby follower in memory."""

    token: str | None = None
    seen_at: float = 0.0

    def observe(self, beat: Beat | None, now: float) -> tuple[bool, Watch]:
        """(whether `beat`'s follower is alive, the watch to keep)."""
        if beat is None:
            return False, Watch()
        if beat.token != self.token:
            return True, Watch(beat.token, now)
        return now - self.seen_at < STALE_SECONDS, self

    def as_dict(self) -> dict:
        return {"token": self.token, "seen_at": self.seen_at}

    @classmethod
    def from_dict(cls, value: dict | None) -> Watch:
        value = value or {}
        return cls(value.get("token"), float(value.get("seen_at") or 0.0))


def fail_runs_of_gone_followers(instance: dg.DagsterInstance, job_name: str, live: str | None) -> list[str]:
    """Fail the unfinished runs of `job_name` made by a follower other than `live` (a follower's run executes
    in its process: once the follower is gone, nothing will finish it, and it would hold its events in flight).
    The failure is a run failure like any other: the failure sensors count it against its events and alert."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=job_name, statuses=_UNFINISHED))
    failed = []
    for run in runs:
        owner = run.tags.get(FOLLOWER_TAG)
        if owner and owner != live:
            instance.report_run_failed(run, f"the events follower {owner} stopped before the run finished")
            failed.append(run.run_id)
    return failed
