"""Benchmark: the marts' dbt build at 100k and 1M KOLs, wall time and peak RSS, dbt's fixed start-up apart.

    .venv/bin/python benchmarks/marts.py [--kols 100000] [--runs 3] [--keep DIR]

Fills a warehouse of its own (the pipeline's tables, made by WarehouseResource.ensure_table, rows generated in
DuckDB) at the nightly benchmark's shares: per 100k KOLs, a detail row each, 5,000 campaigns, 500 products in 5
markets, 100,000 signals naming 2 products each, 100,000 webhook engagement rows (opens and clicks) and a CRM
reconciliation row per KOL; the lake holds one KOL snapshot (night 1). Then, as the marts step builds: the
warehouse copied for dbt to read (what the step does under the writer lock, timed apart and included), then dbt
in a child process that has loaded the code location, as a run's process has when its marts step starts, timed
from there (dbt runs in that process, as the step runs it; the peak RSS is the process's, the code location's
included):
- `first night`: `dbt build` of every mart into an empty build file, as the pipeline runs it (target pipeline);
- `second night`: a second snapshot with 1% of the KOLs changed (tier) and 0.1% gone, built into a copy of the
  first night's marts: kol_history adds only what changed (its own time from dbt's result), reading
  the side file of changed rows the lake writes beside the snapshot (both snapshots are written by the lake's
  own writer, digests and side file included);
- `full rebuild`: the second night again with `--full-refresh`: kol_history rebuilt from both snapshots, the
  yardstick of its incremental night. For both, kol_history's query is also timed alone (its SQL as dbt
  compiled it, on a copy of the first night's marts): dbt's own cost per model is apart;
- `fixed`: the same build over a warehouse of one row per table: dbt's start-up, parse and per-model cost.
Medians of --runs. The nightly sync's own figures (docs/benchmarks-findings.md: 7.74 s at 100k, 95.58 s at 1M)
are the yardstick: the aim is the marts within 10% of the nightly at 1M, within the build's memory limit (1 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.mart_keys import MARTS_PROJECT_DIR  # noqa: E402
from resources.digest import content_fields  # noqa: E402
from resources.environ import environment_with  # noqa: E402
from resources.lake import LakeResource  # noqa: E402
from resources.marts import BUILD_ARGS, MartsResource  # noqa: E402
from resources.warehouse import WarehouseResource  # noqa: E402
from sync.catalog import CAMPAIGN_ENGAGEMENT, CATALOG, KOL_DETAILS, KOLS  # noqa: E402
from sync.schemas import FETCHED_AT  # noqa: E402

NIGHT_1, NIGHT_2 = "2026-11-01", "2026-11-02"
CHILD = f"""
import sys, time
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
import pipelines.definitions  # the code location, loaded in a run's process before its marts step
from assets.dbt_in_process import run_dbt
from benchmarks.memory import own_peak_rss_mb
started = time.monotonic()
result, lines = run_dbt(sys.argv[1:], {{}}, Path.cwd())
seconds = time.monotonic() - started
if not result.success:
    sys.exit("\\n".join(lines[-20:]))
history = next(r.execution_time for r in result.result.results if r.node.unique_id.endswith(".kol_history"))
print(f"{{seconds}} {{own_peak_rss_mb()}} {{history}}")
"""


def fill(data_dir: Path, kols: int) -> None:
    """A warehouse of `kols` KOLs and the rest at the benchmark's shares, and the lake's night-1 KOL snapshot."""
    from crm import tables as crm_tables

    warehouse = WarehouseResource(data_dir=str(data_dir), memory_limit="1GB", threads=2)
    campaigns, products, signals = max(kols // 20, 1), max(kols // 200, 1), kols
    with warehouse.writer() as session:
        conn = session.conn
        for spec in (*CATALOG, KOL_DETAILS, CAMPAIGN_ENGAGEMENT):
            session.ensure_table(spec)
        crm_tables.ensure_tables(conn)
        conn.execute(f"""INSERT INTO kols BY NAME SELECT 'default' AS org, printf('kol_%016x', i) AS id,
            'KOL ' || i AS full_name, 'Dr.' AS title, 'Institution ' || (i % 997) AS institution,
            [['cardiology', 'neurology', 'oncology'][1 + i % 3]] AS specialties, ['tier_1', 'tier_2', 'tier_3'][1 + i % 3] AS tier,
            ['high', 'medium', 'low'][1 + i % 3] AS engagement_level, 'kol' || i || '@example.org' AS email,
            {{'city': 'City ' || (i % 101), 'state': NULL, 'country': 'DE'}} AS location, false AS is_archived,
            TIMESTAMPTZ '2025-01-01' AS created_at, TIMESTAMPTZ '2026-10-01' AS updated_at, now() AS _fetched_at,
            DATE '{NIGHT_1}' AS _snapshot_date, now() AS _loaded_at FROM range({kols}) t(i)""")
        conn.execute("""INSERT INTO kol_details BY NAME SELECT org, id, 'A bio of ' || full_name AS bio, 'notes' AS notes,
            ['devices'] AS research_interests, {'total_events': 3, 'total_campaigns': 2, 'email_open_rate': 0.4,
            'response_rate': 0.1, 'h_index': 12, 'publications_count': 40} AS metrics, updated_at, now() AS enriched_at,
            now() AS _fetched_at, _snapshot_date, now() AS _loaded_at FROM kols""")
        conn.execute(f"""INSERT INTO campaigns BY NAME SELECT 'default' AS org, printf('cmp_%016x', i) AS id,
            'Campaign ' || i AS name, ['product_update', 'event_invitation', 'new_product_launch', 'newsletter', 'custom'][1 + i % 5] AS type,
            ['draft', 'active', 'paused', 'completed'][1 + i % 4] AS status, 200 AS audience_count,
            {{'sent': 200 * (i % 4 > 0)::INT, 'delivered': 190 * (i % 4 > 0)::INT, 'opened': 60 * (i % 4 > 0)::INT,
              'clicked': 12 * (i % 4 > 0)::INT, 'open_rate': 0.3, 'click_rate': 0.06}} AS metrics,
            TIMESTAMPTZ '2025-01-01' + to_days((i % 600)::INT) AS created_at,
            CASE WHEN i % 4 > 0 THEN TIMESTAMPTZ '2025-01-02' + to_days((i % 600)::INT) END AS sent_at,
            now() AS _fetched_at, DATE '{NIGHT_1}' AS _snapshot_date, now() AS _loaded_at FROM range({campaigns}) t(i)""")
        conn.execute(f"""INSERT INTO products BY NAME SELECT 'default' AS org, printf('prd_%016x', i) AS id,
            'Product ' || i AS name, 'active' AS status, 'cleared' AS regulatory_status,
            MAP {{'US': {{'status': 'approved', 'clearance_number': 'K' || i, 'ce_mark': NULL}},
                  'EU': {{'status': 'approved', 'clearance_number': NULL, 'ce_mark': true}},
                  'CN': {{'status': 'under_review', 'clearance_number': NULL, 'ce_mark': NULL}},
                  'JP': {{'status': 'approved', 'clearance_number': NULL, 'ce_mark': NULL}},
                  'IN': {{'status': 'under_review', 'clearance_number': NULL, 'ce_mark': NULL}}}} AS market_status,
            TIMESTAMPTZ '2024-01-01' AS created_at, TIMESTAMPTZ '2026-01-01' AS updated_at, now() AS _fetched_at,
            DATE '{NIGHT_1}' AS _snapshot_date, now() AS _loaded_at FROM range({products}) t(i)""")
        conn.execute(f"""INSERT INTO signals BY NAME SELECT 'default' AS org, printf('sig_%016x', i) AS id,
            'Signal ' || i AS title, {{'level': ['critical', 'high', 'medium', 'low'][1 + i % 4], 'score': 0.5,
            'categories': ['regulatory']}} AS impact,
            [{{'product_id': printf('prd_%016x', i % {products}), 'product_name': 'P', 'relevance_type': 'direct', 'relevance_score': 0.9}},
             {{'product_id': printf('prd_%016x', (i + 7) % {products}), 'product_name': 'P', 'relevance_type': 'competitor', 'relevance_score': 0.5}}] AS product_relevance,
            now() - to_days((i % 120)::INT) AS published_at, now() AS fetched_at, now() AS _fetched_at,
            DATE '{NIGHT_1}' AS _snapshot_date, now() AS _loaded_at FROM range({signals}) t(i)""")
        conn.execute(f"""INSERT INTO campaign_engagement BY NAME SELECT 'default' AS org, printf('wh_evt_%016x', i) AS event_id,
            CASE WHEN i % 5 = 0 THEN 'campaign.link_clicked' ELSE 'campaign.email_opened' END AS event,
            printf('cmp_%016x', i % {campaigns}) AS campaign_id, printf('kol_%016x', (i * 7) % {kols}) AS kol_id,
            now() - to_days((i % 100)::INT) AS occurred_at, now() AS received_at, now() AS _loaded_at FROM range({kols}) t(i)""")
        conn.execute("""INSERT INTO kol_crm_reconciliation BY NAME SELECT org, 'run' AS run_id, now() AS reconciled_at,
            CASE WHEN hash(id) % 10 = 0 THEN 'missing_in_crm' ELSE 'matched' END AS status, id AS kol_id, true AS kol_primary,
            '003' || id AS crm_id, false AS needs_review FROM kols""")
        _snapshot(conn, data_dir, NIGHT_1, "FROM kols")
        session.ensure_history_view(KOLS, LakeResource.relative_glob("kols"))


def _snapshot(conn, data_dir: Path, night: str, select: str) -> None:
    """The KOL snapshot of `night` written by the lake's writer, as the nightly writes it (digests, the side file of
    the rows changed since the snapshot before, in created_at order as the API lists them)."""
    import pyarrow as pa

    lake = LakeResource(data_dir=str(data_dir))
    columns = ", ".join(f'"{name}"' for name in KOLS.schema.names)
    reader = conn.sql(f"SELECT {columns} FROM ({select}) ORDER BY {KOLS.sort}, id").to_arrow_reader(10_000)
    with lake.snapshot("default", KOLS.name, night, KOLS.schema, key=KOLS.key, newest_by=FETCHED_AT,
                       digest=content_fields(KOLS.schema, KOLS.observed), sorted_by=KOLS.sort) as staged:
        for batch in reader:
            for cast in pa.Table.from_batches([batch]).cast(KOLS.schema).to_batches():
                staged.write(cast)
        staged.finish()


def second_night(data_dir: Path) -> None:
    """Night 2's snapshot: 1% of the KOLs another tier, 0.1% gone."""
    warehouse = WarehouseResource(data_dir=str(data_dir), memory_limit="1GB", threads=2)
    with warehouse.writer() as session:
        _snapshot(session.conn, data_dir, NIGHT_2,
                  "SELECT * REPLACE (CASE WHEN hash(id) % 100 = 0 THEN (CASE WHEN tier = 'tier_1' THEN 'tier_2' "
                  "ELSE 'tier_1' END) ELSE tier END AS tier) FROM kols WHERE hash(id) % 1000 <> 7")


def build(data_dir: Path, marts_from: Path | None, *flags: str) -> dict:
    """One `dbt build` as the pipeline's marts step runs it (the warehouse copied for dbt to read, which the step does
    under the writer lock; dbt in a process that has loaded the code location): seconds (the copy's included),
    the copy's seconds (how long the step holds the writer lock), peak RSS (the code location's included),
    kol_history's own seconds."""
    marts = MartsResource(data_dir=str(data_dir))
    marts.discard()
    if marts_from is not None:
        shutil.copyfile(marts_from, marts.build_path)
    started = time.monotonic()
    source = marts.copy_source(WarehouseResource(data_dir=str(data_dir)).path)
    copy_seconds = time.monotonic() - started
    args = [*BUILD_ARGS, "--project-dir", str(MARTS_PROJECT_DIR), "--profiles-dir", str(MARTS_PROJECT_DIR),
            "--target-path", str(marts.dbt_target_path), *flags]
    environment = environment_with(marts.dbt_environment(source))
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=environment,
                          cwd=data_dir)
    marts.discard_source()
    if done.returncode != 0:
        sys.exit(f"dbt build failed: {done.stderr[-4000:]}")
    seconds, rss_mb, history = done.stdout.split()
    return {"seconds": float(seconds) + copy_seconds, "copy_seconds": copy_seconds, "rss_mb": float(rss_mb),
            "kol_history_seconds": float(history), "build_path": marts.build_path}


def history_query_seconds(data_dir: Path, marts_from: Path) -> float:
    """kol_history's SELECT as dbt last compiled it, alone (no dbt start-up, pre-hook or merge), on a copy of
    the marts the build started from: what reading the nights and finding the changes costs."""
    import duckdb

    compiled = next((data_dir / ".marts-dbt" / "compiled").glob("**/kol_history.sql")).read_text()
    scratch = data_dir / "history-query.duckdb"
    shutil.copyfile(marts_from, scratch)
    conn = duckdb.connect(config={"memory_limit": "1GB", "threads": 2})
    try:
        conn.execute(f"SET file_search_path = '{data_dir}'")
        conn.execute(f"ATTACH '{scratch}' AS \"marts-build\"")
        conn.execute(f"ATTACH '{WarehouseResource(data_dir=str(data_dir)).path}' AS warehouse (READ_ONLY)")
        conn.execute('USE "marts-build"')
        started = time.monotonic()
        conn.execute(f"CREATE TEMP TABLE written AS {compiled}")
        return time.monotonic() - started
    finally:
        conn.close()
        scratch.unlink()


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kols", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="Fill this directory (kept) instead of a temporary one.")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        base = options.keep or Path(scratch)
        small, full = base / "fixed", base / "full"
        for folder, kols in ((small, 1), (full, options.kols)):
            shutil.rmtree(folder, ignore_errors=True)
            started = time.monotonic()
            fill(folder, kols)
            print(f"filled {kols:,} KOLs in {time.monotonic() - started:.1f} s", flush=True)
        second_night(full)
        night_2 = full / "lake" / "org=default" / "kols" / f"snapshot_date={NIGHT_2}"
        aside = full / "night-2-aside"
        first_nights, fixed, second_nights, rebuilds = [], [], [], []
        for run in range(options.runs):
            fixed.append(build(small, None))
            night_2.rename(aside)  # the first night sees its own snapshot only
            first = build(full, None)
            aside.rename(night_2)
            first_nights.append(first)
            night_1 = full / "marts-night-1.duckdb"
            shutil.copyfile(first["build_path"], night_1)
            second_nights.append(build(full, night_1))
            second_nights[-1]["query_seconds"] = history_query_seconds(full, night_1)
            rebuilds.append(build(full, night_1, "--full-refresh"))
            rebuilds[-1]["query_seconds"] = history_query_seconds(full, night_1)
            print(f"run {run + 1}: fixed {fixed[-1]['seconds']:.2f} s, first night {first['seconds']:.2f} s "
                  f"({first['rss_mb']:.0f} MB; the warehouse copied in {first['copy_seconds']:.2f} s), "
                  f"second night {second_nights[-1]['seconds']:.2f} s "
                  f"(kol_history {second_nights[-1]['kol_history_seconds']:.2f} s, its query "
                  f"{second_nights[-1]['query_seconds']:.2f} s), full rebuild {rebuilds[-1]['seconds']:.2f} s "
                  f"(kol_history {rebuilds[-1]['kol_history_seconds']:.2f} s, its query "
                  f"{rebuilds[-1]['query_seconds']:.2f} s)", flush=True)
        size = (full / "marts-night-1.duckdb").stat().st_size / 1e6
        print(json.dumps({
            "kols": options.kols,
            "fixed_seconds": round(median_of(fixed, "seconds"), 2),
            "fixed_rss_mb": round(median_of(fixed, "rss_mb")),
            "first_night_seconds": round(median_of(first_nights, "seconds"), 2),
            "first_night_rss_mb": round(median_of(first_nights, "rss_mb")),
            "first_night_kol_history_seconds": round(median_of(first_nights, "kol_history_seconds"), 2),
            "first_night_warehouse_copy_seconds": round(median_of(first_nights, "copy_seconds"), 3),
            "second_night_seconds": round(median_of(second_nights, "seconds"), 2),
            "second_night_rss_mb": round(median_of(second_nights, "rss_mb")),
            "second_night_kol_history_seconds": round(median_of(second_nights, "kol_history_seconds"), 2),
            "second_night_kol_history_query_seconds": round(median_of(second_nights, "query_seconds"), 3),
            "full_rebuild_seconds": round(median_of(rebuilds, "seconds"), 2),
            "full_rebuild_kol_history_seconds": round(median_of(rebuilds, "kol_history_seconds"), 2),
            "full_rebuild_kol_history_query_seconds": round(median_of(rebuilds, "query_seconds"), 3),
            "marts_file_mb": round(size, 1),
        }, indent=2))
        print("command: " + " ".join([Path(sys.executable).name, *sys.argv]))


if __name__ == "__main__":
    main()
