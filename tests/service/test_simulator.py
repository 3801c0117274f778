"""The activity simulator: changes through the store, with the webhook events the API would emit."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from commops_spec.constants import EVENTS
from service import admin
from service.seed import seed
from service.server import ServiceServer
from service.settings import ServiceSettings
from service.simulator import Simulator
from service.store import db
from tests.waiting import wait_until

SMALL = {"kols": 80, "campaigns": 12, "products": 8, "signals": 20, "events": 12}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A seeded database to copy (seeding once keeps the module fast); yields (path, org_id)."""
    path = tmp_path_factory.mktemp("sim_template") / "service.db"
    org_id = admin.create_org(path, "Simulated Medical", "enterprise")
    seed(path, org_id, **SMALL)
    return path, org_id


@pytest.fixture
def seeded_db(template, tmp_path):
    source, org_id = template
    path = tmp_path / "service.db"
    shutil.copy(source, path)  # the template's WAL was checkpointed when its connections closed
    return path, org_id


def _emitted(path) -> list[tuple[str, dict]]:
    conn = db.connect(path)
    try:
        rows = conn.execute("SELECT event, payload FROM webhook_events ORDER BY seq")
        return [(r[0], json.loads(r[1])) for r in rows]
    finally:
        conn.close()


def test_simulator_steps_emit_every_event_kind_through_the_store(seeded_db):
    path, org_id = seeded_db
    simulator = Simulator(path, org_id, random_seed=3)
    try:
        actions = [simulator.step() for _ in range(600)]
    finally:
        simulator.stop()
    emitted = _emitted(path)
    assert {name for name, _ in emitted} == set(EVENTS)
    assert sum(a is not None for a in actions) > 500
    assert all(p["organization_id"] == org_id and p["id"].startswith("wh_evt_") for _, p in emitted)
    high_impact = [p["data"] for name, p in emitted if name == "signal.high_impact"]
    assert high_impact and all(d["impact"]["level"] in ("high", "critical") for d in high_impact)


def test_simulated_changes_are_stored_as_their_events_say(seeded_db):
    path, org_id = seeded_db
    simulator = Simulator(path, org_id, random_seed=5)
    try:
        for _ in range(300):
            simulator.step()
    finally:
        simulator.stop()
    conn = db.connect(path)
    emitted = _emitted(path)
    last_tier = {}
    for name, payload in emitted:
        if name == "kol.tier_changed":
            last_tier[payload["data"]["id"]] = payload["data"]["tier"]
    assert last_tier
    for kol_id, tier in last_tier.items():
        assert conn.execute("SELECT tier FROM kols WHERE id = ?", (kol_id,)).fetchone()[0] == tier
    sent = [p["data"]["id"] for name, p in emitted if name == "campaign.sent"]
    assert sent
    for campaign_id in sent:
        unsent = conn.execute("SELECT count(*) FROM campaign_recipients WHERE campaign_id = ? AND sent_at IS NULL",
                              (campaign_id,)).fetchone()[0]
        assert unsent == 0
    created_events = [p["data"]["id"] for name, p in emitted if name == "event.created"]
    assert created_events
    assert conn.execute("SELECT count(*) FROM events WHERE id IN (SELECT value FROM json_each(?))",
                        (json.dumps(created_events),)).fetchone()[0] == len(created_events)
    conn.close()


def test_simulator_choices_are_reproducible_from_its_seed(template, tmp_path):
    source, org_id = template
    runs = []
    for name in ("a.db", "b.db"):
        path = tmp_path / name
        shutil.copy(source, path)
        simulator = Simulator(path, org_id, random_seed=11)
        try:
            runs.append([simulator.step() for _ in range(120)])
        finally:
            simulator.stop()
    assert runs[0] == runs[1]


def test_simulator_respects_the_plan_kol_limit(seeded_db):
    path, org_id = seeded_db
    simulator = Simulator(path, org_id, random_seed=3, kol_limits={"enterprise": 0})
    try:
        for _ in range(200):
            simulator.step()
    finally:
        simulator.stop()
    assert "create_kol" not in simulator.performed
    assert not [name for name, _ in _emitted(path) if name == "kol.created"]


def test_simulator_runs_inside_the_service_when_enabled_and_stops_with_it(seeded_db):
    path, org_id = seeded_db
    key = admin.create_key(path, org_id, "all")
    server = ServiceServer(ServiceSettings(db=path, rate_limits_enabled=False, simulate_per_second=50))
    with server:
        simulator = server.app.state.simulator
        assert simulator.running
        headers = {"Authorization": f"Bearer {key}"}

        def signal_total() -> int:
            return httpx.get(f"{server.base_url}/signals", headers=headers).json()["meta"]["total"]

        before = signal_total()
        wait_until(lambda: sum(simulator.performed.values()) >= 30, 20, 0.05, what="the simulator to act 30 times")
        # `before` may already include the simulator's first ingests: wait for the list to grow past it.
        wait_until(lambda: signal_total() > before, 20, 0.05, what=f"a signal ingested beyond the first {before}")
    assert not simulator.running  # stopped (and joined) by the service's shutdown hook


def test_simulator_is_off_by_default(seeded_db):
    path, _ = seeded_db
    with ServiceServer(ServiceSettings(db=path)) as server:
        assert not hasattr(server.app.state, "simulator")
    assert _emitted(path) == []
