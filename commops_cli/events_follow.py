"""`commops events follow` (the command: commops_cli/events.py): a long-lived applier. It runs
`apply_webhook_events` in its own process as soon as an event is ready in the inbox, batch by batch, each a run
recorded in the Dagster instance (the UI's run history and lineage, the failure sensors' alerts and counts), with
no sensor tick and no process start in between. While it beats, `webhook_events_sensor` stands down
(pipelines/follower_lease.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import dagster as dg

from assets.webhooks import WEBHOOK_EVENTS_KEY, ApplyResult
from commops_cli.in_process import JobRunner, job_runner
from pipelines.jobs import APPLY_WEBHOOK_EVENTS
from pipelines.sensors import next_requests
from pipelines.follower_lease import (
    BEAT_SECONDS, FOLLOWER_TAG, Beat, Watch, fail_runs_of_gone_followers, follower_name, read_beat, write_beat,
)

TROUBLE_WAIT_SECONDS = 5.0  # after the inbox or the instance could not be reached
STATEMENT_TIMEOUT_MS = 60_000  # on the instance's storage queries


class Lease:
    """This follower's hold on the inbox, kept by a beat every BEAT_SECONDS (a thread of its own, so a long run
    never lets it lapse). Another live follower's beat keeps this one on standby until it stops."""

    def __init__(self, instance: dg.DagsterInstance, name: str):
        self.instance, self.name = instance, name
        self.count = 0
        self.held = threading.Event()
        self._watch = Watch()

    def tick(self) -> None:
        beat = read_beat(self.instance)
        if beat is not None and beat.follower != self.name:
            alive, self._watch = self._watch.observe(beat, time.monotonic())
            if alive:
                self.held.clear()
                return
            fail_runs_of_gone_followers(self.instance, APPLY_WEBHOOK_EVENTS, live=self.name)
        self.count += 1
        write_beat(self.instance, Beat(self.name, self.count))
        self.held.set()

    def release(self) -> None:
        """The beat cleared, so the sensor takes over at its next tick (only if it is still ours)."""
        beat = read_beat(self.instance)
        if beat is not None and beat.follower == self.name:
            write_beat(self.instance, None)


@contextmanager
def beating(instance: dg.DagsterInstance, name: str, say: Callable[[str], None]) -> Iterator[Lease]:
    """The lease, beaten until the `with` block ends (a run in progress when the follower is asked to stop
    keeps it), then released."""
    lease = Lease(instance, name)
    lease.tick()
    if not lease.held.is_set():
        say(f"another follower ({read_beat(instance).follower}) applies the events: standing by until it stops")
    done = threading.Event()

    def beat() -> None:
        while not done.wait(BEAT_SECONDS):
            try:
                lease.tick()
            except Exception as error:  # noqa: BLE001 (the instance unreachable: the next beat tries again)
                say(f"could not beat in the Dagster instance: {_one_line(error)}")

    thread = threading.Thread(target=beat, name="events-follower-beat", daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        done.set()
        thread.join()
        lease.release()


def follow(runner: JobRunner, resources: dict, stop: threading.Event, say: Callable[[str], None], *,
           limit: int, poll_seconds: float) -> None:
    """Apply the inbox's events as they become ready, until `stop` is set."""
    inbox, orgs = resources["inbox"], resources["orgs"]
    # Long-lived, as the webserver: hold storage connections open rather than connect for each of a run's
    # ~150 queries (Postgres storage; a no-op on SQLite).
    runner.instance.optimize_for_webserver(statement_timeout=STATEMENT_TIMEOUT_MS, pool_recycle=3600, max_overflow=20)
    with beating(runner.instance, follower_name(), say) as lease:
        while not stop.is_set():
            if not lease.held.is_set():
                stop.wait(BEAT_SECONDS)
                continue
            try:
                if not _apply_ready(runner, inbox, orgs, lease, say, limit):
                    stop.wait(poll_seconds)
            except Exception as error:  # noqa: BLE001 (the inbox or the instance unreachable: a long-lived process waits)
                say(f"{_one_line(error)}; trying again in {TROUBLE_WAIT_SECONDS:.0f} s")
                stop.wait(TROUBLE_WAIT_SECONDS)


def _apply_ready(runner: JobRunner, inbox, orgs, lease: Lease, say: Callable[[str], None], limit: int) -> bool:
    """One run per organization with ready events not in flight; whether there were any. A run's failure is the
    run's (recorded, alerted on, counted against its events), not this loop's."""
    with inbox.open() as box:
        if not box.pending(limit=1):
            return False
    requests = next_requests(runner.instance, inbox, orgs.all(), limit)[0]
    for request in requests:
        if not lease.held.is_set():  # another follower took over (this one could not beat for a while)
            break
        say(_applied(request.partition_key, runner.run(
            APPLY_WEBHOOK_EVENTS, run_config=request.run_config, partition=request.partition_key,
            tags={**request.tags, FOLLOWER_TAG: lease.name})))
    return bool(requests)


def _applied(org: str, run) -> str:
    if not run.success:
        return (f"{org}: run {run.run_id[:8]} failed: {run.failure} (its events are tried again after a wait; "
                "the failure sensors alert on it)")
    result = run.output(WEBHOOK_EVENTS_KEY, ApplyResult)
    applied = result.applied if result else 0
    set_aside = f", {result.quarantined} quarantined, {result.failed_pending} to retry" if result and (
        result.quarantined or result.failed_pending) else ""
    return f"{org}: {applied} event(s) applied in {run.duration_seconds:.2f} s (run {run.run_id[:8]}){set_aside}"


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
