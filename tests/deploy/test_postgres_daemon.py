"""Dagster deployed as docs/deploy.md says: storage in Postgres, the code-location server and the daemon
as separate processes (the webserver only serves the UI: not started), each run in a process of its own.
The nightly job, the webhook sensor, and a run worker killed mid-run."""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest

from assets.webhooks import event_ids_of
from pipelines.jobs import APPLY_WEBHOOK_EVENTS, NIGHTLY_SYNC
from resources.warehouse import WarehouseResource
from tests.deploy.conftest import Deployment, seeded_ids
from tests.pipeline.sync_support import query
from tests.pipeline.webhook_stack import Stack, new_kol
from tests.waiting import wait_until

# Above the tests' own waits (a run of up to 240 s after the deployment starts): on a loaded host the suite's
# 300 s signal otherwise fired inside the deployment's fixture, and pytest ended the whole run with an INTERNALERROR.
pytestmark = pytest.mark.timeout(600)


def test_the_nightly_job_launched_on_the_deployment_runs_in_its_own_process_lands_every_table_and_is_recorded_in_postgres(deployment: Deployment) -> None:
    run_id = deployment.launch(NIGHTLY_SYNC)
    run = deployment.finished_run(run_id, timeout=240)  # the nightly builds the dbt marts too
    assert run.status == dg.DagsterRunStatus.SUCCESS, deployment.log_tails()
    for table, ids in seeded_ids(deployment.stack.service).items():
        assert {row[0] for row in query(deployment.stack.analytics, f"SELECT id FROM {table}")} == ids, table
    assert deployment.run_rows(run_id) == [(NIGHTLY_SYNC, "SUCCESS")]
    workers = deployment.worker_pids(run_id)
    assert len(workers) == 1 and workers.isdisjoint({deployment.code_server.pid, deployment.daemon.pid, os.getpid()})


def test_the_daemons_webhook_sensor_applies_a_delivered_event(deployment: Deployment) -> None:
    stack = deployment.stack
    kol = stack.change(lambda conn, org: new_kol(conn, org, "Ivy Postgres"))
    # Generous waits: on a loaded host the run may queue behind a marts refresh, which holds the warehouse's writer
    # lock (marts_refresh_sensor starts one at once after a webhook run when the marts were never built, as on a
    # worker whose deployment did not run this module's nightly), and a run process takes seconds to start. The
    # latency itself is measured by benchmarks/webhook_latency.py.
    wait_until(lambda: full_name(stack, kol["id"]), timeout=180, interval=0.25, what="the event's KOL in analytics.duckdb")
    runs = wait_until(lambda: finished_apply_runs(deployment), timeout=120, interval=0.25, what="the apply run to finish")
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS]
    assert deployment.run_rows(runs[0].run_id) == [(APPLY_WEBHOOK_EVENTS, "SUCCESS")]
    assert full_name(stack, kol["id"]) == "Ivy Postgres"


def test_a_run_worker_killed_mid_run_fails_its_run_and_a_later_run_applies_its_events(deployment: Deployment) -> None:
    stack = deployment.stack
    (settled,) = wait_until(lambda: apply_runs_when_settled(deployment), timeout=180, interval=0.25,
                            what="no apply run in flight")  # so the run waiting below is this test's
    before = {run.run_id for run in settled}
    with holding_warehouse_lock(stack.data_dir):  # as a concurrent `commops sync` would: the run waits mid-run
        kol = stack.change(lambda conn, org: new_kol(conn, org, "Kim Killed"))
        run_id = wait_until(lambda: run_waiting_for_lock(deployment), timeout=180, interval=0.25,
                            what="an apply run waiting for the lock")
        [worker] = deployment.worker_pids(run_id)
        os.kill(worker, signal.SIGKILL)
        # The code-location server that started the worker sees it die and marks the run failed.
        killed = deployment.finished_run(run_id, timeout=30)
    assert killed.status == dg.DagsterRunStatus.FAILURE
    assert any("was terminated by signal 9 (SIGKILL)" in (event.message or "") for event in deployment.instance.all_logs(run_id))
    assert deployment.run_rows(run_id) == [(APPLY_WEBHOOK_EVENTS, "FAILURE")]

    def applied() -> str | None:
        stack.end_waits()  # as if the wait after the counted failure were over
        return full_name(stack, kol["id"])

    assert wait_until(applied, timeout=180, interval=0.25, what="the killed run's event applied") == "Kim Killed"
    later = wait_until(lambda: [r for r in finished_apply_runs(deployment) if r.run_id not in before | {run_id}],
                       timeout=120, interval=0.25, what="the later apply run to finish")
    assert any(run.status == dg.DagsterRunStatus.SUCCESS for run in later)
    assert set(event_ids_of(killed.run_config)) <= {e for run in later if run.status == dg.DagsterRunStatus.SUCCESS for e in event_ids_of(run.run_config)}


def full_name(stack: Stack, kol_id: str) -> str | None:
    if not stack.analytics.exists():
        return None
    rows = query(stack.analytics, f"SELECT full_name FROM kols WHERE id = '{kol_id}'")
    return rows[0][0] if rows else None


def finished_apply_runs(deployment: Deployment) -> list[dg.DagsterRun]:
    """The apply runs so far, oldest first, once none is in flight (empty while one is)."""
    settled = apply_runs_when_settled(deployment)
    return settled[0] if settled else []


def apply_runs_when_settled(deployment: Deployment) -> tuple[list[dg.DagsterRun]] | None:
    """(the apply runs so far, oldest first, maybe none) once none is in flight; None while one is."""
    runs = deployment.instance.get_runs(filters=dg.RunsFilter(job_name=APPLY_WEBHOOK_EVENTS))
    return None if any(not run.is_finished for run in runs) else (list(reversed(runs)),)


def run_waiting_for_lock(deployment: Deployment) -> str | None:
    for run in deployment.instance.get_runs(filters=dg.RunsFilter(job_name=APPLY_WEBHOOK_EVENTS, statuses=[dg.DagsterRunStatus.STARTED])):
        messages = [event.user_message or "" for event in deployment.instance.all_logs(run.run_id)]
        if any("Waiting for the warehouse lock" in m for m in messages) and not any("Got the warehouse lock" in m for m in messages):
            return run.run_id
    return None


@contextmanager
def holding_warehouse_lock(data_dir: Path) -> Iterator[None]:
    with open(WarehouseResource(data_dir=str(data_dir)).lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
