"""The analysts' marts end to end: two nightly syncs of a real service, webhooks between them through the real
receiver, the marts built by dbt in each nightly and published in analytics.duckdb, compared with what the
service says; a build whose ERROR test fails keeps the last good marts; dbt's unit tests of the formulas."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import defaultdict
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pytest

from commops_cli.marts import run_marts_build
from resources.digest import DIGEST_COLUMN, content_fields
from resources.lake import LakeResource
from resources.marts import MartsResource
from resources.warehouse import WarehouseResource
from sync.catalog import CAMPAIGNS, KOLS
from sync.schemas import FETCHED_AT
from tests.pipeline.conftest import start_service
from tests.pipeline.sync_support import api_detail, api_items, query, sync
from tests.pipeline.webhook_stack import Stack, new_kol, stack  # noqa: F401 (fixture)
from tests.receiver.conftest import wait_until

TIMEZONE_ENV = "COMMOPS_TIMEZONE"
# Two nights in one test: the run's snapshot date is its creation date in COMMOPS_TIMEZONE, and these two zones
# are 26 hours apart, so the second sync's date is always a later day than the first's.
FIRST_NIGHT_ZONE, SECOND_NIGHT_ZONE = "Etc/GMT+12", "Etc/GMT-14"


def _send(conn, org_id: str, audience: list[dict], type_: str, opens: list[dict], clicks: list[dict]) -> dict:
    from service.store import campaigns

    created = campaigns.create_campaign(conn, org_id, {
        "name": f"{type_} to {len(audience)}", "type": type_, "audience": {"kol_ids": [k["id"] for k in audience]},
        "email": {"subject": "News", "body_html": "<p>Hi</p>", "from_name": "Team"},
        "schedule": {"type": "immediate"},
    })
    campaigns.set_campaign_status(conn, org_id, created["id"], "active")
    for kol in opens:
        campaigns.record_open(conn, org_id, created["id"], kol["email"])
    for kol in clicks:
        campaigns.record_click(conn, org_id, created["id"], kol["email"])
    return created


def _wait_for(stack: Stack, *events: str) -> None:
    """Until the inbox holds at least these events (names, repeated for several)."""
    def arrived() -> bool:
        names = [e.event for e in stack.inbox.pending()]
        return all(names.count(name) >= events.count(name) for name in set(events))
    wait_until(arrived, timeout=20)


def _service_engagement(service) -> dict[str, tuple[int, int, int]]:
    """Per KOL, what the service recorded: (opens, clicks, campaigns opened or clicked)."""
    conn = service.connect()
    try:
        rows = conn.execute("SELECT kol_id, count(opened_at), count(clicked_at), "
                            "count(DISTINCT CASE WHEN opened_at IS NOT NULL OR clicked_at IS NOT NULL THEN campaign_id END) "
                            "FROM campaign_recipients GROUP BY kol_id").fetchall()
    finally:
        conn.close()
    return {row[0]: tuple(row[1:]) for row in rows}


def _expected_history(before: dict, after: dict, night_1: date, night_2: date) -> list[tuple]:
    """kol_history's rows of a KOL the API showed as `before` on night 1 and `after` on night 2."""
    def tracked(item: dict) -> tuple:
        return item["tier"], item.get("institution"), item.get("engagement_level"), item["specialties"]

    first = (before["tier"], before.get("engagement_level"), night_1)
    if after["is_archived"]:
        return [(*first, night_2, False, "archived")]
    if tracked(after) != tracked(before):
        return [(*first, night_2, False, "changed"), (after["tier"], after.get("engagement_level"), night_2, None, True, None)]
    return [(*first, None, True, None)]


def _expected_performance(service) -> list[tuple]:
    """campaign_performance computed from the API's campaign list: sums per type and month, then one division."""
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    for item in api_items(service, CAMPAIGNS).values():
        month = date.fromisoformat((item.get("sent_at") or item["created_at"])[:7] + "-01")
        m = item.get("metrics") or {}
        counts = [m.get("sent", 0), m.get("delivered", 0), m.get("opened", 0), m.get("clicked", 0)]
        row = sums[(item["type"], month)]
        row[0] += 1
        row[1] += counts[0] > 0
        for i, value in enumerate(counts):
            row[2 + i] += value

    def ratio(numerator: int, denominator: int) -> float | None:
        return None if denominator == 0 else numerator / denominator

    return sorted(("default", type_, month, n, n_sent, sent, delivered, opened, clicked, ratio(delivered, sent),
                   ratio(opened, delivered), ratio(clicked, delivered))
                  for (type_, month), (n, n_sent, sent, delivered, opened, clicked) in sums.items())


def test_two_nights_with_a_tier_change_an_archival_and_new_engagement_leave_the_marts_as_the_service_says(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.store import kols

    ana, ben, cleo = stack.change(lambda conn, org: [new_kol(conn, org, n) for n in ("Ana Lopez", "Ben Okafor", "Cleo Marsh")])
    stack.change(lambda conn, org: _send(conn, org, [ana, ben], "newsletter", opens=[ana], clicks=[]))
    _wait_for(stack, "kol.created", "kol.created", "kol.created", "campaign.sent", "campaign.email_opened")
    stack.apply_pending()

    monkeypatch.setenv(TIMEZONE_ENV, FIRST_NIGHT_ZONE)
    first = sync(stack.service, stack.data_dir, instance=stack.instance, enrich_details_limit=10, marts=True)
    at_night_1 = api_items(stack.service, KOLS)
    tier_before = at_night_1[ana["id"]]["tier"]
    new_tier = "tier_1" if tier_before != "tier_1" else "tier_2"

    # Between the nights: a tier change, an archival, a new campaign opened and clicked (webhooks applied).
    stack.change(lambda conn, org: kols.change_tier(conn, org, ana["id"], new_tier))
    stack.change(lambda conn, org: kols.archive_kol(conn, org, ben["id"]))
    stack.change(lambda conn, org: _send(conn, org, [ana, cleo], "product_update", opens=[ana, cleo], clicks=[cleo]))
    _wait_for(stack, "kol.tier_changed", "kol.archived", "campaign.email_opened", "campaign.email_opened",
              "campaign.link_clicked")
    stack.apply_pending()

    monkeypatch.setenv(TIMEZONE_ENV, SECOND_NIGHT_ZONE)
    second = sync(stack.service, stack.data_dir, instance=stack.instance, enrich_details_limit=10, marts=True)
    night_1, night_2 = date.fromisoformat(first.snapshot_date), date.fromisoformat(second.snapshot_date)
    assert night_1 < night_2

    # kol_360: identity, details, engagement, as the service has them now.
    api = api_items(stack.service, KOLS)
    engagement = _service_engagement(stack.service)
    rows = {r[0]: r[1:] for r in query(stack.analytics, "SELECT kol_id, full_name, tier, engagement_level, institution, "
                                        "is_archived, h_index, email_open_rate, opens_30d, clicks_30d, campaigns_reached, "
                                        "last_engagement_at IS NOT NULL, as_of > last_seen_at FROM kol_360")}
    assert set(rows) == set(api)
    for kol in (ana, ben, cleo):
        item = api[kol["id"]]
        metrics = api_detail(stack.service, kol["id"])["metrics"] if not item["is_archived"] else None
        opens, clicks, reached = engagement.get(kol["id"], (0, 0, 0))
        assert rows[kol["id"]][:5] == (item["full_name"], item["tier"], item["engagement_level"], item["institution"],
                                       item["is_archived"]), kol["full_name"]
        if metrics is not None:
            assert rows[kol["id"]][5:7] == (metrics["h_index"], metrics["email_open_rate"]), kol["full_name"]
        assert rows[kol["id"]][7:] == (opens, clicks, reached, reached > 0, True), kol["full_name"]
    assert rows[ana["id"]][1] == new_tier and rows[ben["id"]][4] is True and rows[cleo["id"]][8] == 1

    # campaign_performance: every row, as computed from the API's campaigns.
    assert query(stack.analytics, "SELECT * FROM campaign_performance ORDER BY ALL") == _expected_performance(stack.service)

    # kol_history: every KOL's rows as the service's two states give them (Ana's tier change, Ben's archival; the
    # engagement a KOL showed moves the engagement level the service derives, a change too).
    history = query(stack.analytics, "SELECT kol_id, tier, engagement_level, valid_from, valid_to, is_current, "
                                     "closed_reason FROM kol_history ORDER BY kol_id, valid_from")
    by_kol = defaultdict(list)
    for kol_id, *rest in history:
        by_kol[kol_id].append(tuple(rest))
    assert dict(by_kol) == {kol_id: _expected_history(at_night_1[kol_id], api[kol_id], night_1, night_2) for kol_id in api}
    assert by_kol[ana["id"]][-1][:2] == (new_tier, api[ana["id"]]["engagement_level"])
    assert by_kol[ben["id"]][-1][-1] == "archived"

    # Every mart's columns carry their dbt description in analytics.duckdb.
    undocumented = query(stack.analytics, "SELECT table_name, column_name FROM duckdb_columns() WHERE table_name IN "
                                          "('kol_360', 'campaign_funnel', 'campaign_performance', 'product_market_matrix', "
                                          "'kol_history') AND (comment IS NULL OR comment = '')")
    assert undocumented == []


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory):
    """A small service synced once (marts built and published); its data directory."""
    service = start_service(tmp_path_factory.mktemp("service"), kols=4, campaigns=2, products=2, signals=2)
    try:
        data_dir = tmp_path_factory.mktemp("synced") / "data"
        sync(service, data_dir, marts=True)
        yield data_dir
    finally:
        service.server.stop()


def test_the_first_build_in_a_new_data_directory_reuses_the_projects_parse(synced: Path):
    """dbt parses the whole project again (seconds of every build's start) whenever its profile's connection values
    change: the pipeline's profile reads the same in every data directory, so no build parses the project whole."""
    log = (synced / ".marts-dbt" / "dbt.log").read_text()
    assert "Nothing changed, skipping partial parsing" in log
    assert "Unable to do partial parsing" not in log


def test_the_warehouses_writers_go_on_while_dbt_builds_and_the_marts_read_the_warehouse_as_the_build_began(
        synced: Path, tmp_path: Path):
    """A build holds the warehouse's writer lock only to copy the file it reads: a webhook event's apply, say,
    lands while dbt builds, and the marts show the warehouse as it was when the build began. (Before the test
    below, which breaks the warehouse it shares.)"""
    data_dir = tmp_path / "data"
    shutil.copytree(synced, data_dir)
    (kol_id, name), *_ = query(data_dir / "analytics.duckdb", "SELECT id, full_name FROM kols ORDER BY id")
    source, written = data_dir / ".marts-source.duckdb", {}

    def write_while_dbt_builds() -> None:
        wait_until(source.exists, timeout=120, interval=0.01, what="the build's copy of the warehouse")
        with WarehouseResource(data_dir=str(data_dir)).writer() as session:
            session.conn.execute("UPDATE kols SET full_name = 'Written Meanwhile' WHERE id = ?", [kol_id])
        written["while dbt builds"] = source.exists()

    writer = threading.Thread(target=write_while_dbt_builds)
    writer.start()
    build = run_marts_build(data_dir)
    writer.join(timeout=150)
    assert build.swapped_in and written == {"while dbt builds": True}
    analytics = data_dir / "analytics.duckdb"
    assert query(analytics, f"SELECT full_name FROM kols WHERE id = '{kol_id}'") == [("Written Meanwhile",)]
    assert query(analytics, f"SELECT full_name FROM kol_360 WHERE kol_id = '{kol_id}'") == [(name,)]
    assert not source.exists()


def test_a_build_whose_error_test_fails_keeps_the_last_good_marts_while_the_raw_tables_publish(synced: Path):
    analytics = synced / "analytics.duckdb"
    (good_as_of,) = query(analytics, "SELECT DISTINCT as_of FROM kol_360")[0]

    # Real data can break a key only by a bug: a KOL twice in the warehouse (as a faulty write would leave it).
    conn = duckdb.connect(str(synced / "warehouse.duckdb"))
    try:
        conn.execute("INSERT INTO kols SELECT * REPLACE ('Duplicated Row' AS full_name) FROM kols LIMIT 1")
    finally:
        conn.close()

    build = run_marts_build(synced)

    assert build.failure is None and not build.swapped_in
    assert any(check.startswith("marts/kol_360:unique_key_kol_360") for check in build.failed_checks)
    assert query(analytics, "SELECT count(*) FROM kols WHERE full_name = 'Duplicated Row'") == [(1,)]  # raw: published
    assert query(analytics, "SELECT DISTINCT as_of FROM kol_360") == [(good_as_of,)]  # marts: the last good ones
    assert query(analytics, "SELECT count(*) FROM kol_360 WHERE full_name = 'Duplicated Row'") == [(0,)]
    assert not (synced / ".marts-build.duckdb").exists()


@pytest.mark.timeout(600)  # two dbt processes and a build: slow on a loaded host
def test_dbt_unit_tests_of_the_rate_formulas_and_of_kol_history_pass_and_fail_when_an_expectation_is_wrong(
        synced: Path, tmp_path: Path):
    """`dbt test --select test_type:unit` from the project folder (target dev: it reads the published copy)."""
    from assets.dbt_in_process import run_dbt
    from assets.mart_keys import MARTS_PROJECT_DIR
    from assets.marts import DBT_EXECUTABLE

    project = tmp_path / "project"
    shutil.copytree(MARTS_PROJECT_DIR, project, ignore=shutil.ignore_patterns("target", "logs"))
    variables = {"COMMOPS_DATA_DIR": str(synced), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}

    def dbt(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([DBT_EXECUTABLE, *args, "--profiles-dir", "."], cwd=project,
                              env={**os.environ, **variables}, capture_output=True, text=True)

    # The relations the unit tests' inputs and outputs are typed from (kol_history's own, for the incremental case),
    # built by dbt in this process: only the tests are run as an analyst runs them.
    built, lines = run_dbt(["run", "--select", "+campaign_performance", "+kol_history", "--profiles-dir", "."],
                           variables, project)
    assert built.success, "\n".join(lines)[-3000:]
    passed = dbt("test", "--select", "test_type:unit")
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert passed.stdout.count("PASS campaign_performance::") == 1 and passed.stdout.count("PASS kol_history::") == 2

    yml = project / "models" / "marts" / "unit_tests.yml"
    yml.write_text(yml.read_text().replace("open_rate: 0.46", "open_rate: 0.3"))  # the mean of the campaign rates
    failed = dbt("test", "--select", "test_type:unit")
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert "Failure in unit_test campaign_performance_weights_rates_by_volume" in failed.stdout
    assert "PASS=2" in failed.stdout  # kol_history's two still pass


def test_commops_docs_writes_the_marts_documentation_site_as_one_page(synced: Path):
    done = subprocess.run([str(Path(sys.executable).with_name("commops")), "docs", "--data-dir", str(synced)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    page = synced / "marts-docs" / "static_index.html"
    assert done.stdout.strip().splitlines() == [line for line in done.stdout.strip().splitlines()
                                                if line.startswith("The marts' documentation:")]  # one line, no dbt log
    text = page.read_text()
    assert "kol_360" in text and "opens_90d + clicks_90d (each open and each click counts once)" in text


def _write_night(data_dir: Path, night: date, change: str) -> None:
    """A KOL snapshot of `night` written as the nightly writes it (digests, and the side file of the rows changed
    since the snapshot before): the latest snapshot's rows, passed through the DuckDB SELECT `change` (on `kols`)."""
    lake = LakeResource(data_dir=str(data_dir))
    latest = lake.latest_snapshot_file("default", KOLS.name, night.isoformat())
    conn = duckdb.connect()
    try:
        conn.execute(f"CREATE TABLE kols AS SELECT * EXCLUDE ({DIGEST_COLUMN}) FROM read_parquet('{latest}')")
        rows = conn.sql(change).to_arrow_table().select(KOLS.schema.names).cast(KOLS.schema)
    finally:
        conn.close()
    with lake.snapshot("default", KOLS.name, night.isoformat(), KOLS.schema, key=KOLS.key, newest_by=FETCHED_AT,
                       digest=content_fields(KOLS.schema, KOLS.observed), sorted_by=KOLS.sort) as staged:
        for batch in rows.to_batches():
            staged.write(batch)
        staged.finish()


def _build_history(data_dir: Path, build: Path, *flags: str) -> str:
    """kol_history built into `build` as the pipeline builds it (target pipeline, the warehouse attached, dbt in this
    process as in the marts step); the SQL dbt ran."""
    from assets.dbt_in_process import run_dbt
    from assets.mart_keys import MARTS_PROJECT_DIR

    target = data_dir.parent / "dbt-target"
    variables = {**MartsResource(data_dir=str(data_dir)).dbt_environment(
        WarehouseResource(data_dir=str(data_dir)).path, in_data_dir=False), "COMMOPS_MARTS_BUILD_PATH": str(build),
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    result, lines = run_dbt(["run", "--target", "pipeline", "--select", "stg_kol_snapshots", "kol_history", *flags,
                             "--project-dir", str(MARTS_PROJECT_DIR), "--profiles-dir", str(MARTS_PROJECT_DIR),
                             "--target-path", str(target), "--log-path", str(target)], variables, data_dir)
    assert result.success, "\n".join(lines)[-3000:]
    return next(target.glob("compiled/**/kol_history.sql")).read_text()


def test_kol_history_built_night_by_night_from_the_changed_rows_equals_a_full_rebuild(synced: Path, tmp_path: Path):
    data_dir = tmp_path / "data"
    shutil.copytree(synced, data_dir, ignore=shutil.ignore_patterns(".marts*", "marts*.duckdb"))
    (night_1,) = [date.fromisoformat(p.name.split("=")[1]) for p in
                  (data_dir / "lake" / "org=default" / KOLS.name).glob("snapshot_date=*")]
    night_2, night_3 = night_1 + timedelta(days=1), night_1 + timedelta(days=2)
    first, second, third, fourth = [row[0] for row in query(data_dir / "warehouse.duckdb",
                                                            "SELECT DISTINCT id FROM kols WHERE NOT is_archived ORDER BY id")][:4]
    nightly = tmp_path / "nightly.duckdb"

    _build_history(data_dir, nightly)
    # Night 1 run again the same day, every KOL another tier: more than half changed, so no side file; the
    # snapshot names the one it replaced, and the night is read again.
    _write_night(data_dir, night_1, "SELECT * REPLACE (CASE WHEN tier = 'tier_1' THEN 'tier_2' ELSE 'tier_1' END AS tier) "
                                    "FROM kols")
    assert not (data_dir / "lake" / "org=default" / KOLS.name / f"snapshot_date={night_1}" / "changed").exists()
    ran = _build_history(data_dir, nightly)
    assert f"date '{night_1}'" in ran
    assert query(nightly, "SELECT count(*) FROM kol_history WHERE tier IS DISTINCT FROM (SELECT tier FROM read_parquet("
                 f"'{LakeResource(data_dir=str(data_dir)).snapshot_file('default', KOLS.name, night_1.isoformat())}') s "
                 "WHERE s.id = kol_history.kol_id)")[0][0] == 0
    # Night 2: a tier change and an archival.
    _write_night(data_dir, night_2, f"SELECT * REPLACE (CASE WHEN id <> '{first}' THEN tier WHEN tier = 'tier_1' "
                                    f"THEN 'tier_2' ELSE 'tier_1' END AS tier, is_archived OR id = '{second}' AS is_archived) FROM kols")
    ran = _build_history(data_dir, nightly)
    assert f"snapshot_date={night_2}/changed/data.parquet" in ran  # the changed rows, not the whole snapshot
    # Night 3: a KOL gone from the API, another moved; then the night run again, the re-run also moving a third
    # (its side file, compared with the first run's, lacks the second move: it must not stand for the night).
    _write_night(data_dir, night_3, f"SELECT * REPLACE (CASE WHEN id = '{fourth}' THEN 'Elsewhere' ELSE institution "
                                    f"END AS institution) FROM kols WHERE id <> '{third}'")
    ran = _build_history(data_dir, nightly)
    assert f"snapshot_date={night_3}/changed/data.parquet" in ran
    assert f"date '{night_2}'" not in ran  # a night read once, written once, is not read again
    _write_night(data_dir, night_3, f"SELECT * REPLACE (CASE WHEN id = '{first}' THEN 'Moved' ELSE institution "
                                    f"END AS institution) FROM kols")
    ran = _build_history(data_dir, nightly)
    assert "changed/data.parquet" not in ran  # night 3 read whole

    rebuilt = tmp_path / "rebuilt.duckdb"
    _build_history(data_dir, rebuilt, "--full-refresh")
    history = "SELECT kol_id, tier, institution, valid_from, valid_to, is_current, closed_reason FROM kol_history ORDER BY ALL"
    assert query(nightly, history) == query(rebuilt, history)
    rows = query(rebuilt, history)
    assert {(kol_id, closed) for kol_id, *_, closed in rows if closed} == {
        (first, "changed"), (second, "archived"), (third, "gone"), (fourth, "changed")}
    assert [(kol_id, valid_from) for kol_id, _, institution, valid_from, *_ in rows
            if institution in ("Elsewhere", "Moved")] == sorted([(first, night_3), (fourth, night_3)])


def test_a_dbt_stopped_before_its_models_is_told_in_one_line_naming_the_cause():
    from assets.dbt_in_process import run_dbt
    from assets.mart_keys import MARTS_PROJECT_DIR
    from assets.marts import _summary

    result, lines = run_dbt(["build", "--target", "no_such_target", "--project-dir", str(MARTS_PROJECT_DIR),
                             "--profiles-dir", str(MARTS_PROJECT_DIR)], {}, MARTS_PROJECT_DIR)
    echoed = "\n".join(json.loads(line)["info"]["msg"] for line in lines)  # what dagster-dbt echoes of them
    assert not result.success
    summary = _summary(echoed)
    assert "no_such_target" in summary and "\n" not in summary


def test_the_jobs_that_build_no_marts_run_without_dbt_and_name_the_same_marts():
    """A CRM or webhook run, or `commops sync --no-marts`, loads the code location without the marts' dbt assets
    (dbt is not imported), and analytics still follows the marts the dbt project builds."""
    program = """
import sys, tempfile
import dagster as dg
import commops_cli.crm_run, commops_cli.events, commops_cli.events_follow, commops_cli.sync
from pipelines.definitions import make_definitions
from resources.settings import load_settings
settings = load_settings(data_dir=tempfile.mkdtemp())
light = make_definitions(settings, marts=False)
for job in ("nightly_sync", "crm_reconciliation", "apply_webhook_events"):
    light.resolve_job_def(job)
print("dagster_dbt" in sys.modules)
full = make_definitions(settings)
analytics = full.resolve_assets_def("analytics")
marts = full.resolve_assets_def(dg.AssetKey(["marts", "kol_360"]))
print(sorted(k.to_user_string() for k in marts.keys) == sorted(k.to_user_string() for k in
      full.resolve_job_def("refresh_marts").asset_layer.selected_asset_keys if k.path[0] == "marts"))
print(sorted(k.to_user_string() for k in analytics.asset_deps[analytics.key] if k.path[0] == "marts")
      == sorted(k.to_user_string() for k in marts.keys if len(k.path) == 2))
print(sorted(k.to_user_string() for k in light.resolve_assets_def("analytics").asset_deps[analytics.key]) ==
      sorted(k.to_user_string() for k in analytics.asset_deps[analytics.key]))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "True"]
