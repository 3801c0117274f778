"""One event never blocks the rest: events that can never be applied, or keep failing, are set aside
(quarantined) with their error while the others are applied; `commops events status` names them and
`commops events retry` puts them back. Against the real service and receiver, and the spec server
for refetches that fail for one KOL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import httpx
import pytest
from click.testing import CliRunner

from commops_cli.commops import main
from pipelines.definitions import build_resources, make_definitions
from pipelines.jobs import APPLY_WEBHOOK_EVENTS
from pipelines.sensors import run_config, webhook_events_failure_sensor
from resources.webhooks import InboxResource
from resources.settings import load_settings
from tests.conftest import InboxStore
from tests.pipeline.sync_support import api_key_in_env, query, with_orgs
from tests.pipeline.webhook_stack import Stack, new_kol, stack  # noqa: F401 (fixture)
from tests.receiver.conftest import SECRET, post_signed
from tests.spec_server import SpecServer
from tests.waiting import wait_until
from resources.inbox.envelope import Envelope
from resources.inbox import INBOX_URL_ENV, Inbox
from webhooks.receiver.server import ReceiverServer
from webhooks.receiver.settings import ReceiverSettings
from webhooks.signatures import read_secrets_file

ROOT = Path(__file__).resolve().parents[2]
UNREADABLE_CREATED_AT = "22/11/2026 10:00"  # what a receiver before the envelope check stored as it came


@pytest.fixture(autouse=True)
def on_both_stores(inbox_store: InboxStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here runs on the SQLite inbox and on Postgres (COMMOPS_INBOX_URL for the receiver,
    the job, the sensors and the commands alike)."""
    if inbox_store.url:
        monkeypatch.setenv(INBOX_URL_ENV, inbox_store.url)


def _store_as_an_older_receiver_did(inbox: Inbox, event_id: str, org_id: str) -> None:
    """An event whose created_at cannot be read, stored as a receiver before the envelope check did."""
    as_sent = {"id": event_id, "event": "kol.updated", "created_at": UNREADABLE_CREATED_AT,
               "data": {"id": "kol_whoever"}, "organization_id": org_id}
    unchecked = Envelope(event_id, "kol.updated", datetime.now(UTC), as_sent["data"], org_id, as_sent)
    assert inbox.add(json.dumps(as_sent).encode(), unchecked)


def _commops(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    commops = Path(sys.executable).parent / "commops"  # the console script of this environment
    return subprocess.run([commops, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def _apply(stack: Stack) -> str:
    env = {"COMMOPS_API_KEY": stack.service.api_key, "DAGSTER_HOME": str(stack.data_dir / "dagster_home")}
    (stack.data_dir / "dagster_home").mkdir(exist_ok=True)
    args = ["events", "apply", "--base-url", stack.service.base_url, "--data-dir", str(stack.data_dir)]
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_bad_event_in_a_stream_is_quarantined_named_and_retryable_while_every_good_event_is_applied(stack: Stack) -> None:
    first = stack.change(lambda conn, org: new_kol(conn, org, "Ada Byrne"))
    stack.change(lambda conn, org: new_kol(conn, org, "Bo Carver"))
    stack.wait_for_events(2)
    bad_id = "wh_evt_stored_by_an_older_receiver"
    _store_as_an_older_receiver_did(stack.inbox, bad_id, stack.service.org_id)
    naive = {"id": "wh_evt_naive_created_at", "event": "kol.updated", "created_at": "2026-11-22T10:00:00",
             "data": {"id": first["id"]}, "organization_id": stack.service.org_id}
    [secret] = read_secrets_file(stack.receiver.settings.secrets_file).values()
    with httpx.Client(timeout=10) as client:
        assert post_signed(client, stack.receiver.url, naive, secret=secret).status_code == 200
    stack.change(lambda conn, org: new_kol(conn, org, "Cy Dunn"))
    pending = stack.wait_for_events(5)
    assert [e.id for e in pending][2:4] == [bad_id, naive["id"]]  # in the middle of the stream

    output = _apply(stack)

    assert "4 event(s) applied" in output and f"quarantined now: {bad_id}" in output
    assert {r[0] for r in stack.query("SELECT full_name FROM kols")} == {"Ada Byrne", "Bo Carver", "Cy Dunn"}
    statuses = dict(stack.query("SELECT id, status FROM webhook_events"))
    assert statuses == {**{e.id: "applied" for e in pending if e.id != bad_id}, bad_id: "quarantined"}
    assert stack.query(f"SELECT created_at = '2026-11-22 10:00:00+00'::TIMESTAMPTZ FROM webhook_events "
                       f"WHERE id = '{naive['id']}'") == [(True,)]
    [(error, applied_at)] = stack.query(f"SELECT error, applied_at FROM webhook_events WHERE id = '{bad_id}'")
    assert error.startswith("created_at is not an ISO 8601 timestamp") and applied_at is None
    assert stack.inbox.counts()["applied"] == 4 and stack.inbox.counts()["pending"] == 0

    status = _commops("events", "status", "--data-dir", str(stack.data_dir))
    assert status.returncode == 0, status.stderr
    assert "quarantined 1" in status.stdout
    assert f"quarantined {bad_id} kol.updated: 1 attempt(s), error: created_at is not an ISO 8601 timestamp" in status.stdout

    unknown = _commops("events", "retry", "wh_evt_nobody", "--data-dir", str(stack.data_dir))
    assert unknown.returncode == 1 and unknown.stderr.strip().count("\n") == 0
    assert "no event wh_evt_nobody in the inbox" in unknown.stderr
    retried = _commops("events", "retry", bad_id, "--data-dir", str(stack.data_dir))
    assert retried.returncode == 0, retried.stderr
    assert f"1 event(s) back to pending: {bad_id}" in retried.stdout
    assert [(e.id, e.attempts) for e in stack.inbox.pending()] == [(bad_id, 0)]

    again = _apply(stack)  # it still cannot be parsed: set aside again, nothing else moves
    assert f"quarantined now: {bad_id}" in again
    assert stack.inbox.counts()["quarantined"] == 1 and stack.inbox.counts()["applied"] == 4
    assert dict(stack.query("SELECT id, status FROM webhook_events")) == statuses


@pytest.fixture
def spec_stack(tmp_path: Path) -> Iterator[tuple[SpecServer, ReceiverServer, dg.Definitions, dg.DagsterInstance]]:
    """The spec server (for the refetch) with 3 KOLs, a receiver that knows SECRET, and the job's
    definitions with COMMOPS_EVENTS_MAX_ATTEMPTS=2."""
    with SpecServer(kols=3) as server:
        receiver = ReceiverServer(ReceiverSettings(webhook_secrets=SECRET, data_dir=tmp_path / "data")).start()
        try:
            settings = load_settings(base_url=server.base_url, data_dir=tmp_path / "data", events_max_attempts=2)
            with dg.DagsterInstance.ephemeral() as instance:
                yield server, receiver, make_definitions(settings, build_resources(settings)), instance
        finally:
            receiver.stop()


def test_an_event_whose_kol_refetch_fails_fails_alone_is_quarantined_at_max_attempts_and_applies_after_retry(spec_stack) -> None:
    server, receiver, defs, instance = spec_stack
    kol_ids = sorted(k["id"] for k in server.truth("kols"))
    events = [{"id": f"wh_evt_kol_{i}", "event": "kol.updated", "created_at": "2026-11-22T10:00:00Z",
               "data": {"id": kol_id}, "organization_id": "org_spec"} for i, kol_id in enumerate(kol_ids)]
    opened = {"id": "wh_evt_opened", "event": "campaign.email_opened", "created_at": "2026-11-22T10:00:00+02:00",
              "data": {"campaign_id": "cmp_1", "kol_id": kol_ids[0], "occurred_at": "soon"}, "organization_id": "org_spec"}
    with httpx.Client(timeout=10) as client:
        for env in [*events, opened]:
            assert post_signed(client, receiver.url, env).status_code == 200
    troubled = events[1]["id"]
    server.fail_detail(kol_ids[1], times=2)  # GET /v1/kols/{id} of that KOL alone answers 400, twice
    job = defs.resolve_job_def(APPLY_WEBHOOK_EVENTS)
    inbox = Inbox(receiver.settings.inbox_location, max_attempts=2)

    def run(event_ids: list[str]) -> dg.ExecuteInProcessResult:
        with api_key_in_env(server.api_key):
            result = job.execute_in_process(run_config=run_config(event_ids), instance=with_orgs(instance),
                                            partition_key="default", raise_on_error=False)
        assert result.success, result.get_step_failure_events()
        return result

    first = run([e.id for e in inbox.pending()])
    metadata = _metadata(first)
    assert (metadata["applied"], metadata["quarantined"], metadata["failed_pending"]) == (3, 0, 1)
    assert metadata["unreadable_values"] == {"event data": 1}  # occurred_at "soon": NULL in the row, kept as sent in data
    analytics = receiver.settings.data_dir / "analytics.duckdb"
    assert query(analytics, "SELECT occurred_at, json_extract_string(w.data, '$.occurred_at') FROM campaign_engagement "
                            "JOIN webhook_events w ON w.id = event_id") == [(None, "soon")]
    [event] = inbox.get([troubled])
    assert (event.attempts, event.applied_at, event.quarantined_at) == (1, None, None)
    assert "refetching KOL" in event.last_error and "400" in event.last_error and event.retry_after
    assert inbox.pending() == []  # it waits; nothing else is left
    assert _check(first).passed

    second = run([troubled])  # the second failure reaches COMMOPS_EVENTS_MAX_ATTEMPTS
    assert _metadata(second)["quarantined_ids"] == [troubled]
    assert [e.id for e in inbox.quarantined()] == [troubled]
    assert query(analytics, f"SELECT status, attempts FROM webhook_events WHERE id = '{troubled}'") == [("quarantined", 2)]
    check = _check(second)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN and troubled in check.description

    assert inbox.retry([troubled]) == [troubled]
    third = run([troubled])  # the service answers again
    assert _metadata(third)["applied"] == 1 and _check(third).passed
    assert inbox.get([troubled])[0].applied_at is not None
    assert query(analytics, f"SELECT status, error FROM webhook_events WHERE id = '{troubled}'") == [("applied", None)]
    assert query(analytics, f"SELECT count(*) FROM kols WHERE id = '{kol_ids[1]}'") == [(1,)]


def test_a_failed_publish_counts_an_attempt_against_every_event_of_the_run(stack: Stack) -> None:
    kol = stack.change(lambda conn, org: new_kol(conn, org, "Di Evans"))
    [event] = stack.wait_for_events(1)
    stack.analytics.mkdir(parents=True)  # a directory where the published file goes: the publish step fails
    (stack.analytics / "keep").write_text("")
    failed = stack.execute(stack.tick().run_requests[0])
    assert not failed.success
    assert [e.step_key for e in failed.get_step_failure_events()] == ["analytics"]
    [after] = stack.inbox.get([event.id])
    assert (after.attempts, after.applied_at) == (1, None) and after.last_error.startswith("analytics: ")

    (stack.analytics / "keep").unlink()
    stack.analytics.rmdir()
    stack.end_waits()
    stack.apply_pending()
    assert stack.query(f"SELECT w.attempts, k.full_name FROM webhook_events w, kols k WHERE k.id = '{kol['id']}'") == [
        (1, "Di Evans")
    ]


def test_a_crashed_run_counts_one_attempt_through_the_run_failure_sensor_and_a_quarantined_event_gets_its_row(stack: Stack) -> None:
    stack.change(lambda conn, org: new_kol(conn, org, "Eve Ford"))
    [event] = stack.wait_for_events(1)
    request = stack.tick().run_requests[0]
    job = stack.defs.resolve_job_def(APPLY_WEBHOOK_EVENTS)
    with api_key_in_env(stack.service.api_key):  # started, then its process died: run monitoring fails it
        run = stack.instance.create_run_for_job(job, run_config=request.run_config, status=dg.DagsterRunStatus.STARTED)
    stack.instance.report_run_failed(run)
    failure = wait_until(lambda: stack.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE))
    inbox = InboxResource(data_dir=str(stack.data_dir))
    for _ in range(2):  # evaluated twice (or after the failure hook): one failure per run
        context = dg.build_run_status_sensor_context(
            sensor_name="webhook_events_failure_sensor", dagster_event=failure[0].dagster_event,
            dagster_instance=stack.instance, dagster_run=stack.instance.get_run_by_id(run.run_id),
            resources={"inbox": inbox},
        ).for_run_failure()
        webhook_events_failure_sensor(context)
    [after] = stack.inbox.get([event.id])
    assert after.attempts == 1 and after.last_error.startswith("run failed")

    for n in range(2, 6):  # four more runs fail the same way: the fifth failure quarantines it
        stack.inbox.mark_failed([event.id], "run failed: worker lost", run_id=f"crashed-{n}")
    assert [e.id for e in stack.inbox.quarantined()] == [event.id]
    stack.change(lambda conn, org: new_kol(conn, org, "Flo Grant"))
    stack.wait_for_events(1)
    stack.apply_pending()  # the next run writes its row too
    assert stack.query(f"SELECT status, attempts, error FROM webhook_events WHERE id = '{event.id}'") == [
        ("quarantined", 5, "run failed: worker lost")
    ]


def _metadata(result: dg.ExecuteInProcessResult) -> dict:
    [materialization] = [
        e.materialization for e in result.get_asset_materialization_events()
        if e.materialization.asset_key.path == ["warehouse", "webhook_events"]
    ]
    return {key: getattr(value, "value", value) for key, value in materialization.metadata.items()}


def _check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    [evaluation] = result.get_asset_check_evaluations()
    return evaluation
