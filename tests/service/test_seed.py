"""The seed generator: deterministic, realistic, internally consistent, fast, silent (no events)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest
from click.testing import CliRunner

from commops_spec.constants import IMPACT_LEVELS, MARKETS
from service import admin
from service import seed as seed_module
from service import seed_vocab as V
from service.cli import service as service_cli
from service.seed import WINDOW, reference_end_for, seed
from service.store import db, metrics

SEEDED_TABLES = (
    "kols", "events", "event_attendees", "interactions", "publications", "product_lines", "products",
    "campaigns", "campaign_recipients", "signals", "signal_products",
)
SMALL = {"kols": 60, "campaigns": 8, "products": 6, "signals": 30, "events": 10}
A_DAY = datetime(2026, 11, 1)  # an explicit reference end: the same rows on any day the tests run


def _db_with_org(path, org_id: str = "org_fixedfortests") -> str:
    """A database holding one enterprise organization with a known id (ids derive from it)."""
    db.init_db(path)
    conn = db.connect(path)
    conn.execute("INSERT INTO organizations (id, name, plan, created_at) VALUES (?, 'Seed Test', 'enterprise', ?)",
                 (org_id, "2026-01-01T00:00:00.000000Z"))
    conn.close()
    return org_id


def _dump(path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in SEEDED_TABLES}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The default dataset, seeded once; read-only use."""
    path = tmp_path_factory.mktemp("seed") / "service.db"
    org_id = _db_with_org(path)
    counts = seed(path, org_id)
    conn = db.connect(path)
    yield conn, org_id, counts
    conn.close()


def test_same_random_seed_gives_identical_rows(tmp_path):
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    seed(first, _db_with_org(first), random_seed=7, reference_end=A_DAY, **SMALL)
    seed(second, _db_with_org(second), random_seed=7, reference_end=A_DAY, **SMALL)
    dumped = _dump(first)
    assert dumped == _dump(second)
    assert all(dumped[t] for t in SEEDED_TABLES)


# The smallest catalog the generator looped forever on (random_seed 0): product 3,983 found all
# 300 brand-and-generation names of its family taken (nightly_sync.py --scale 8 and up).
PAST_THE_NAME_SPACE = {"kols": 0, "campaigns": 0, "products": 3_983, "signals": 0, "events": 0}
FAMILIES = tuple(family for families in V.PRODUCT_LINES.values() for family, _, _ in families)


def _product_names(path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM products ORDER BY rowid")]
    finally:
        conn.close()


def test_a_catalog_past_the_brand_and_generation_names_gets_unique_model_names(tmp_path):
    path = tmp_path / "service.db"
    seed(path, _db_with_org(path), reference_end=A_DAY, **PAST_THE_NAME_SPACE)
    names = _product_names(path)
    assert len(names) == len(set(names)) == PAST_THE_NAME_SPACE["products"]
    per_family = Counter(next(f for f in FAMILIES if name.endswith(" " + f)) for name in names)
    assert max(per_family.values()) > len(V.BRAND_STEMS) * 10  # past brand x generation for one family at least
    brands = "|".join(V.BRAND_STEMS)
    model = re.compile(rf"({brands}) (G|X|S|M|AV|LX)\d+ .+")
    assert any(model.fullmatch(name) for name in names)
    assert all(re.match(rf"({brands})[ ]", name) for name in names)


def test_seeding_a_full_catalog_again_adds_unique_names(tmp_path):
    path = tmp_path / "service.db"
    org_id = _db_with_org(path)
    seed(path, org_id, reference_end=A_DAY, **PAST_THE_NAME_SPACE)
    seed(path, org_id, reference_end=A_DAY, **PAST_THE_NAME_SPACE)
    names = _product_names(path)
    assert len(names) == len(set(names)) == 2 * PAST_THE_NAME_SPACE["products"]


def test_same_random_seed_gives_identical_rows_past_the_name_space(tmp_path):
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    for path in (first, second):
        seed(path, _db_with_org(path), random_seed=0, reference_end=A_DAY, **PAST_THE_NAME_SPACE)
    assert _dump(first) == _dump(second)


def _indexes(path) -> set[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return set(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'").fetchall())
    finally:
        conn.close()


def test_a_large_seed_written_by_the_writer_process_gives_the_same_rows_and_indexes(tmp_path, monkeypatch):
    inline, parallel = tmp_path / "inline.db", tmp_path / "parallel.db"
    seed(inline, _db_with_org(inline), random_seed=7, reference_end=A_DAY, **SMALL)
    _db_with_org(parallel)
    schema_indexes = _indexes(parallel)
    monkeypatch.setattr(seed_module, "LARGE", 0)  # as a large seed: a child process writes, indexes built after
    seed(parallel, "org_fixedfortests", random_seed=7, reference_end=A_DAY, **SMALL)
    assert _dump(parallel) == _dump(inline)
    assert _indexes(parallel) == schema_indexes


def test_a_write_failing_in_the_writer_process_is_one_line_naming_its_cause(tmp_path, monkeypatch):
    path = tmp_path / "service.db"
    org_id = admin.create_org(path, "Acme Medical", "enterprise")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TRIGGER no_signals BEFORE INSERT ON signals BEGIN SELECT RAISE(ABORT, 'signals are closed'); END")
    conn.close()
    schema_indexes = _indexes(path)
    monkeypatch.setattr(seed_module, "LARGE", 0)
    result = CliRunner().invoke(service_cli, ["seed", "--db", str(path), "--org", org_id, "--kols", "30",
                                              "--signals", "5"])
    assert result.exit_code == 1
    assert "IntegrityError: signals are closed" in result.output and "Traceback" not in result.output
    assert _indexes(path) == schema_indexes  # dropped for the load, built again on the way out


def test_every_moment_of_one_utc_day_gives_the_same_reference_end():
    morning, night = datetime(2026, 11, 23, 0, 0, 1, tzinfo=UTC), datetime(2026, 11, 23, 23, 59, 59, tzinfo=UTC)
    assert reference_end_for(morning) == reference_end_for(night) == datetime(2026, 11, 23)
    assert reference_end_for(datetime(2026, 11, 24, 0, 30, tzinfo=UTC)) == datetime(2026, 11, 24)


def test_another_reference_end_moves_the_dates_and_keeps_the_rest(tmp_path):
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    seed(first, _db_with_org(first), random_seed=7, reference_end=A_DAY, **SMALL)
    seed(second, _db_with_org(second), random_seed=7, reference_end=A_DAY + timedelta(days=100), **SMALL)
    rows = []
    for path in (first, second):
        conn = sqlite3.connect(path)
        rows.append(conn.execute("SELECT id, full_name, institution, created_at FROM kols ORDER BY id").fetchall())
        conn.close()
    assert [row[:3] for row in rows[0]] == [row[:3] for row in rows[1]]
    moved = [datetime.fromisoformat(row[3].rstrip("Z")) + timedelta(days=100) for row in rows[0]]
    assert [datetime.fromisoformat(row[3].rstrip("Z")) for row in rows[1]] == moved


def test_another_random_seed_gives_other_data(tmp_path):
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    seed(first, _db_with_org(first), random_seed=1, **SMALL)
    seed(second, _db_with_org(second), random_seed=2, **SMALL)
    names = [{r[2] for r in _dump(p)["kols"]} for p in (first, second)]
    assert names[0] != names[1]


def test_seeding_again_adds_rows_with_fresh_ids_and_unique_emails(tmp_path):
    path = tmp_path / "service.db"
    org_id = _db_with_org(path)
    first = seed(path, org_id, **SMALL)
    second = seed(path, org_id, **SMALL)
    assert first["kols"] == second["kols"] == SMALL["kols"]
    conn = db.connect(path)
    assert tuple(conn.execute("SELECT count(*), count(DISTINCT id), count(DISTINCT email_lower) FROM kols")
                 .fetchone()) == (2 * SMALL["kols"],) * 3
    assert conn.execute("SELECT count(DISTINCT id) FROM signals").fetchone()[0] == 2 * SMALL["signals"]
    # product lines are reused by name, not duplicated
    assert tuple(conn.execute("SELECT count(*), count(DISTINCT name) FROM product_lines").fetchone()) == (6, 6)
    conn.close()


def test_two_organizations_seeded_alike_get_distinct_ids(tmp_path):
    path = tmp_path / "service.db"
    seed(path, _db_with_org(path, "org_one"), **SMALL)
    seed(path, _db_with_org(path, "org_two"), **SMALL)
    conn = db.connect(path)
    assert conn.execute("SELECT count(DISTINCT id) FROM kols").fetchone()[0] == 2 * SMALL["kols"]
    conn.close()


def test_seed_is_a_bulk_load_that_emits_no_webhook_events(seeded):
    conn, _, counts = seeded
    assert counts["kols"] == 200
    assert conn.execute("SELECT count(*) FROM webhook_events").fetchone()[0] == 0


def test_seed_refuses_an_unknown_organization(tmp_path):
    path = tmp_path / "service.db"
    db.init_db(path)
    with pytest.raises(ValueError, match="org_missing.*create-org"):
        seed(path, "org_missing")


def test_default_dataset_covers_every_enum_value(seeded):
    conn, org_id, _ = seeded

    def values(sql: str) -> set:
        return {r[0] for r in conn.execute(sql, (org_id,))}

    active = "FROM kols WHERE org_id = ? AND is_archived = 0"
    assert values(f"SELECT tier {active}") == {"tier_1", "tier_2", "tier_3"}
    assert values(f"SELECT engagement_level {active}") == {"high", "medium", "low"}
    assert values("SELECT is_archived FROM kols WHERE org_id = ?") == {0, 1}
    assert len(values("SELECT j.value FROM kols, json_each(specialties) j WHERE org_id = ?")) >= 8
    assert values("SELECT type FROM campaigns WHERE org_id = ?") == {
        "product_update", "event_invitation", "new_product_launch", "newsletter", "custom"}
    assert values("SELECT status FROM campaigns WHERE org_id = ?") == {"draft", "active", "paused", "completed"}
    assert values("SELECT status FROM products WHERE org_id = ?") == {"active", "in_development", "discontinued"}
    assert values("SELECT j.value FROM products, json_each(target_markets) j WHERE org_id = ?") == set(MARKETS)
    assert values("SELECT j.value ->> 'status' FROM products, json_each(market_status) j WHERE org_id = ?") == {
        "approved", "under_review"}
    assert values("SELECT source_key FROM signals WHERE org_id = ?") == {
        "fda", "ema", "nmpa", "pmda", "tga", "health_canada", "mhra", "industry"}
    assert values("SELECT impact_level FROM signals WHERE org_id = ?") == set(IMPACT_LEVELS)
    assert values("SELECT sentiment FROM signals WHERE org_id = ?") == {"positive", "neutral", "negative"}
    assert values("SELECT is_read FROM signals WHERE org_id = ?") == {0, 1}
    assert values("SELECT is_bookmarked FROM signals WHERE org_id = ?") == {0, 1}
    assert values("SELECT status FROM events WHERE org_id = ?") == {"scheduled", "completed", "cancelled"}


def test_products_carry_clearance_numbers_and_ce_marks_per_market(seeded):
    conn, _, _ = seeded
    for (raw,) in conn.execute("SELECT market_status FROM products"):
        for market, entry in json.loads(raw).items():
            if market == "EU":
                assert entry["ce_mark"] is (entry["status"] == "approved")
            elif market == "US" and entry["status"] == "approved":
                assert re.fullmatch(r"[KP]\d{6}", entry["clearance_number"])
            elif entry["status"] == "approved":
                assert entry["clearance_number"]
    lines = conn.execute("SELECT DISTINCT product_line_id FROM products").fetchall()
    assert all(r[0].startswith("pl_") for r in lines)


def test_signals_are_consistent_and_point_at_real_products(seeded):
    conn, org_id, _ = seeded
    products = {r[0]: r[1] for r in conn.execute("SELECT id, name FROM products WHERE org_id = ?", (org_id,))}
    bands = {"critical": (85, 100), "high": (65, 85), "medium": (35, 65), "low": (0, 35)}
    related = 0
    for level, score, relevance, title, summary in conn.execute(
            "SELECT impact_level, impact_score, product_relevance, title, ai_summary FROM signals"):
        assert bands[level][0] <= score <= bands[level][1]
        assert title and summary
        for item in json.loads(relevance):
            assert products[item["product_id"]] == item["product_name"]
            assert 0 <= item["relevance_score"] <= 1
            related += 1
    assert related > 0
    assert conn.execute("SELECT count(*) FROM signal_products").fetchone()[0] == related


def test_campaign_deliveries_are_consistent_with_campaign_status(seeded):
    conn, _, _ = seeded
    drafts_sent = conn.execute(
        "SELECT count(*) FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id "
        "WHERE c.status = 'draft' AND (r.sent_at IS NOT NULL OR c.sent_at IS NOT NULL)").fetchone()[0]
    assert drafts_sent == 0
    mismatched = conn.execute(
        "SELECT count(*) FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id "
        "WHERE c.status != 'draft' AND r.sent_at IS NOT c.sent_at").fetchone()[0]
    assert mismatched == 0
    disordered = conn.execute(
        "SELECT count(*) FROM campaign_recipients WHERE (opened_at IS NOT NULL AND (delivered_at IS NULL "
        "OR opened_at < delivered_at)) OR (clicked_at IS NOT NULL AND (opened_at IS NULL OR clicked_at < opened_at))"
    ).fetchone()[0]
    assert disordered == 0
    counts = conn.execute(
        "SELECT c.audience_count, (SELECT count(*) FROM campaign_recipients r WHERE r.campaign_id = c.id) "
        "FROM campaigns c").fetchall()
    assert all(a == b and a > 0 for a, b in counts)
    assert conn.execute("SELECT count(*) FROM campaign_recipients WHERE opened_at IS NOT NULL").fetchone()[0] > 0


def test_timestamps_fall_in_the_two_years_before_the_seeding_day(seeded):
    conn, _, _ = seeded
    end = reference_end_for(datetime.now(UTC))
    lo, hi, bad = conn.execute(
        "SELECT min(created_at), max(updated_at), count(*) FILTER (WHERE updated_at < created_at) FROM kols"
    ).fetchone()
    assert bad == 0
    assert (end - WINDOW - timedelta(days=1)).isoformat() <= lo and hi <= end.isoformat()
    assert conn.execute("SELECT max(published_at) FROM signals").fetchone()[0] <= end.isoformat()
    assert all(date.fromisoformat(r[0]) for r in conn.execute("SELECT date FROM events"))


def test_a_fresh_seed_has_activity_in_the_last_30_days(seeded):
    conn, _, _ = seeded
    now = datetime.now(UTC)
    month_ago = (now - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    count = lambda sql: conn.execute(sql, (month_ago,)).fetchone()[0]  # noqa: E731
    assert count("SELECT count(*) FROM campaigns WHERE sent_at > ?") > 0
    assert count("SELECT count(*) FROM interactions WHERE occurred_at > ?") > 0
    assert count("SELECT count(*) FROM signals WHERE published_at > ?") > 0
    assert conn.execute("SELECT count(*) FROM events WHERE date > ?", (now.date().isoformat(),)).fetchone()[0] > 0


def test_the_analysts_last_30_days_query_has_rows_on_a_fresh_seed(seeded):
    """docs/analysts.md: high-impact signals of the last 30 days and the products they concern
    (signals joined to signal_product_relevance, impact critical or high, published_at > now() - 30 days)."""
    conn, _, _ = seeded
    month_ago = (datetime.now(UTC) - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    rows = conn.execute(
        "SELECT s.published_at, s.impact_level, p.name FROM signals s"
        " JOIN signal_products r ON r.signal_id = s.id JOIN products p ON p.id = r.product_id"
        " WHERE s.impact_level IN ('critical', 'high') AND s.published_at > ?",
        (month_ago,),
    ).fetchall()
    assert {level for _, level, _ in rows} == {"critical", "high"}


def test_derived_kol_fields_are_already_computed(seeded):
    conn, org_id, _ = seeded
    ids = [r[0] for r in conn.execute("SELECT id FROM kols WHERE org_id = ?", (org_id,))]
    conn.execute("BEGIN")
    try:
        changed = metrics.refresh_kol_metrics(conn, ids, touch=False)
    finally:
        conn.execute("ROLLBACK")
    assert changed == []
    assert conn.execute("SELECT count(*) FROM kols WHERE event_count > 0 AND h_index > 0").fetchone()[0] > 0


def test_kols_look_real(seeded):
    conn, _, _ = seeded
    rows = conn.execute("SELECT full_name, institution, specialties, country, email FROM kols").fetchall()
    assert all(re.fullmatch(r"[a-z_]+", s) for r in rows for s in json.loads(r[2]))
    assert all(re.fullmatch(r"[A-Z]{2}", r[3]) for r in rows)
    assert all("@" in r[4] and " " not in r[4] for r in rows)
    assert any(r[1] == "Mayo Clinic" or r[1].startswith("Charité") or r[1].startswith("Karolinska") for r in rows)
    assert len({r[0] for r in rows}) > 150


def test_seeding_2000_kols_with_their_activity_takes_seconds(tmp_path):
    path = tmp_path / "service.db"
    org_id = _db_with_org(path)
    started = time.perf_counter()
    counts = seed(path, org_id, kols=2000, campaigns=100, products=30, signals=2000, events=60)
    elapsed = time.perf_counter() - started
    assert counts["kols"] == 2000 and counts["campaign_recipients"] > 2000
    assert elapsed < 10, f"seeding 2,000 KOLs took {elapsed:.1f} s"


def test_seed_command_prints_rows_written_per_table(tmp_path):
    path = tmp_path / "service.db"
    org_id = admin.create_org(path, "Acme Medical", "professional")
    result = CliRunner().invoke(service_cli, ["seed", "--db", str(path), "--org", org_id, "--kols", "30",
                                              "--campaigns", "4", "--products", "5", "--signals", "12",
                                              "--events", "6", "--random-seed", "3"])
    assert result.exit_code == 0, result.output
    lines = dict(line.split("\t") for line in result.stdout.splitlines() if "\t" in line)
    assert lines["kols"] == "30" and lines["campaigns"] == "4" and lines["signals"] == "12"
    assert int(lines["campaign_recipients"]) > 0


def test_seed_command_names_an_unknown_organization(tmp_path):
    path = tmp_path / "service.db"
    db.init_db(path)
    result = CliRunner().invoke(service_cli, ["seed", "--db", str(path), "--org", "org_nothere"])
    assert result.exit_code != 0
    assert "org_nothere" in result.output
