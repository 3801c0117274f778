"""Webhook events end to end: the real service's deliveries → receiver → inbox → sensor (Dagster's
test context) → apply_webhook_events in-process → rows in analytics.duckdb."""

from __future__ import annotations

import dagster as dg

from pipelines.definitions import ASSETS, build_resources
from pipelines.sensors import BATCH_TAG, run_config
from resources.settings import load_settings
from tests.pipeline.sync_support import api_detail, api_key_in_env
from tests.pipeline.webhook_stack import Stack, new_kol, new_signal, stack  # noqa: F401 (fixture)
from tests.service.webhook_support import free_port


def _kols(conn, org_id):
    from service.store import kols

    a = new_kol(conn, org_id, "Ana Lopez")
    kols.update_kol(conn, org_id, a["id"], {"title": "Chief of Cardiology"})
    kols.change_tier(conn, org_id, a["id"], "tier_1")
    b = new_kol(conn, org_id, "Ben Okafor")
    kols.archive_kol(conn, org_id, b["id"])
    return a, b


def _campaign(conn, org_id, kol):
    from service.store import campaigns

    created = campaigns.create_campaign(conn, org_id, {
        "name": "Launch", "type": "product_update", "audience": {"kol_ids": [kol["id"]]},
        "email": {"subject": "News", "body_html": "<p>Hi</p>", "from_name": "Team"},
        "schedule": {"type": "immediate"},
    })
    campaigns.set_campaign_status(conn, org_id, created["id"], "active")
    campaigns.record_open(conn, org_id, created["id"], kol["email"])
    return created


def test_kol_signal_and_campaign_events_reach_analytics_through_the_sensor_and_the_job(stack: Stack) -> None:
    a, b = stack.change(_kols)
    signal = stack.change(new_signal)
    campaign = stack.change(lambda conn, org: _campaign(conn, org, a))
    # kol.created x2, updated, tier_changed, archived, signal.new + high_impact, campaign created, sent, opened
    events = stack.wait_for_events(10)
    assert {e.event for e in events} >= {
        "kol.created", "kol.updated", "kol.tier_changed", "kol.archived", "signal.new",
        "campaign.created", "campaign.sent", "campaign.email_opened",
    }

    run = stack.apply_pending()

    rows = {r[0]: r[1:] for r in stack.query("SELECT id, title, tier, is_archived, email, location.city FROM kols")}
    detail_a = api_detail(stack.service, a["id"])
    assert rows[a["id"]] == ("Chief of Cardiology", "tier_1", False, a["email"], detail_a["contact"]["address"]["city"])
    assert rows[b["id"]][2] is True
    assert stack.query(f"SELECT updated_at = '{detail_a['updated_at']}'::TIMESTAMPTZ FROM kol_details WHERE id = '{a['id']}'") == [(True,)]
    assert stack.query(f"SELECT status, metrics.opened FROM campaigns WHERE id = '{campaign['id']}'") == [("active", 1)]
    assert stack.query("SELECT event, campaign_id, kol_id FROM campaign_engagement") == [
        ("campaign.email_opened", campaign["id"], a["id"])
    ]
    assert stack.query(f"SELECT impact.level FROM signals WHERE id = '{signal['id']}'") == [("high",)]
    applied = stack.query(f"SELECT id FROM webhook_events WHERE run_id = '{run.run_id}' AND applied_at IS NOT NULL")
    assert {r[0] for r in applied} == {e.id for e in events}
    assert stack.inbox.counts()["pending"] == 0
    assert stack.tick().run_requests == []  # nothing left to request

    materialized = {e.asset_key.to_user_string() for e in run.get_asset_materialization_events()}
    assert {"warehouse/kols", "warehouse/kol_details", "warehouse/campaigns", "warehouse/signals",
            "warehouse/campaign_engagement", "warehouse/webhook_events", "analytics", "webhooks/applied"} <= materialized


def test_a_run_that_fails_midway_leaves_its_events_pending_and_a_retry_under_a_new_key_converges(stack: Stack) -> None:
    from service.store import kols

    a = stack.change(lambda conn, org: new_kol(conn, org, "Cleo Marsh"))
    stack.change(lambda conn, org: kols.change_tier(conn, org, a["id"], "tier_2"))
    events = stack.wait_for_events(2)

    first = stack.tick().run_requests[0]
    dead = stack.definitions_for(f"http://127.0.0.1:{free_port()}/v1")  # the service is unreachable for this run
    failed = stack.execute(first, defs=dead)
    assert not failed.success
    failing = stack.inbox.failing()
    assert [e.id for e in failing] == [e.id for e in events]
    assert all(e.attempts == 1 and "COMMOPS_BASE_URL" in e.last_error and e.retry_after for e in failing)
    assert not stack.analytics.exists()  # nothing was published
    assert stack.tick().run_requests == []  # they wait before the next attempt

    stack.end_waits()
    second = stack.tick().run_requests[0]
    assert second.tags[BATCH_TAG] == first.tags[BATCH_TAG] and second.run_key != first.run_key
    assert stack.execute(second).success
    assert stack.query(f"SELECT tier, attempts FROM kols JOIN webhook_events w ON true WHERE kols.id = '{a['id']}' LIMIT 1") == [("tier_2", 1)]
    assert stack.inbox.counts() == {
        "total": 2, "pending": 0, "backing_off": 0, "failing": 0, "claimed": 0, "quarantined": 0, "applied": 2,
        "unknown_event": 0,
    }


def test_events_applied_out_of_order_and_twice_converge_to_the_services_state(stack: Stack) -> None:
    from service.store import kols

    a = stack.change(lambda conn, org: new_kol(conn, org, "Dara Quinn"))
    for title in ("Fellow", "Consultant", "Professor"):
        stack.change(lambda conn, org, title=title: kols.update_kol(conn, org, a["id"], {"title": title}))
    events = stack.wait_for_events(4)
    ids = [e.id for e in events]

    # newest first, one run per event, then the oldest again: each run refetches the current state
    for event_id in [*reversed(ids), ids[0]]:
        run = stack.execute(dg.RunRequest(run_config=run_config([event_id])))
        assert run.success
        assert stack.query(f"SELECT title FROM kols WHERE id = '{a['id']}'") == [("Professor",)]
    # a duplicate delivery of the same id is not stored again
    assert stack.inbox.counts()["total"] == 4 and stack.inbox.counts()["pending"] == 0
    assert stack.query("SELECT count(*) FROM webhook_events") == [(4,)]


def test_the_sensor_never_requests_an_event_carried_by_an_in_flight_run(stack: Stack) -> None:
    first = stack.change(lambda conn, org: new_kol(conn, org, "Eli Stone"))
    stack.wait_for_events(1)
    request = stack.tick().run_requests[0]
    job = stack.defs.resolve_job_def("apply_webhook_events")
    with api_key_in_env(stack.service.api_key):  # created as the daemon would, never launched
        queued = stack.instance.create_run_for_job(
            job, run_config=request.run_config, tags=request.tags, status=dg.DagsterRunStatus.NOT_STARTED
        )
    assert stack.tick().run_requests == []  # in flight: not requested again

    stack.change(lambda conn, org: new_kol(conn, org, "Fay Lind"))
    stack.wait_for_events(2)
    late = stack.tick().run_requests[0]  # only the new event
    assert run_config_ids(late) == [e.id for e in stack.inbox.pending()][1:]

    stack.instance.report_run_canceled(queued)  # the queued run never runs: its event is requested again
    again = stack.tick().run_requests[0]
    assert run_config_ids(again)[0] == run_config_ids(request)[0]
    assert stack.execute(again).success
    assert stack.query(f"SELECT count(*) FROM kols WHERE id = '{first['id']}'") == [(1,)]


def run_config_ids(request: dg.RunRequest) -> list[str]:
    return request.run_config["ops"]["warehouse__webhook_events"]["config"]["event_ids"]


def test_a_nightly_load_of_an_older_snapshot_does_not_overwrite_a_fresher_webhook_row(stack: Stack) -> None:
    from service.store import kols

    a = stack.change(lambda conn, org: new_kol(conn, org, "Gus Ortiz"))
    settings = load_settings(base_url=stack.service.base_url, data_dir=stack.data_dir, enrich_details_limit=0)
    resources = build_resources(settings)
    with api_key_in_env(stack.service.api_key):
        lake = dg.materialize(ASSETS, selection=[dg.AssetKey(["lake", "kols"])], resources=resources,
                              instance=stack.instance, partition_key="default")
    assert lake.success
    stack.change(lambda conn, org: kols.update_kol(conn, org, a["id"], {"title": "Dean"}))
    stack.wait_for_events(2)
    stack.apply_pending()
    with api_key_in_env(stack.service.api_key):  # the nightly load of the snapshot read before the change
        load = dg.materialize(
            ASSETS, selection=[dg.AssetKey(["warehouse", "kols"]), dg.AssetKey(["analytics"])],
            resources=resources, instance=stack.instance, partition_key="default",
        )
    assert load.success
    assert stack.query(f"SELECT title FROM kols WHERE id = '{a['id']}'") == [("Dean",)]


def test_commops_events_apply_applies_every_pending_event_in_process(stack: Stack) -> None:
    from click.testing import CliRunner

    from commops_cli.commops import main

    kol = stack.change(lambda conn, org: new_kol(conn, org, "Hal Price"))
    stack.wait_for_events(1)
    env = {"COMMOPS_API_KEY": stack.service.api_key, "DAGSTER_HOME": str(stack.data_dir / "dagster_home")}
    (stack.data_dir / "dagster_home").mkdir()
    args = ["--base-url", stack.service.base_url, "--data-dir", str(stack.data_dir)]
    result = CliRunner().invoke(main, ["events", "apply", *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "1 event(s) applied in 1 run(s); 0 pending" in result.output
    assert "kol.created 1" in result.output
    assert stack.query(f"SELECT full_name FROM kols WHERE id = '{kol['id']}'") == [("Hal Price",)]
    status = CliRunner().invoke(main, ["events", "status", "--data-dir", str(stack.data_dir)], catch_exceptions=False)
    assert "pending 0" in status.output and "applied 1" in status.output


def test_a_run_never_applies_an_event_another_run_holds_and_a_later_run_takes_it_once_released(stack: Stack) -> None:
    kol = stack.change(lambda conn, org: new_kol(conn, org, "Hal Ives"))
    [event] = stack.wait_for_events(1)
    request = stack.tick().run_requests[0]
    assert [e.id for e in stack.inbox.claim([event.id], "another-run")] == [event.id]  # e.g. `commops events apply`

    held = stack.execute(request)
    assert held.success
    assert stack.query("SELECT count(*) FROM webhook_events") == [(0,)]  # not this run's to apply
    [after] = stack.inbox.get([event.id])
    assert (after.applied_at, after.attempts, after.claimed_by) == (None, 0, "another-run")
    assert stack.tick().run_requests == []  # held: not ready for anyone else

    stack.inbox.mark_failed([event.id], "worker lost", run_id="another-run")  # the other run gives it up
    stack.end_waits()
    run = stack.apply_pending()
    assert stack.query(f"SELECT w.run_id, w.status, k.full_name FROM webhook_events w, kols k WHERE k.id = '{kol['id']}'") == [
        (run.run_id, "applied", "Hal Ives")
    ]
    [done] = stack.inbox.get([event.id])
    assert done.applied_at is not None and done.claimed_by is None
