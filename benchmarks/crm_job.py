"""Benchmark: the crm_reconciliation job whole, at N KOLs x ~N contacts, a first night and a second night.

    .venv/bin/python benchmarks/crm_job.py [--kols 100000] [--runs 3] [--rate 0.1] [--changed 0.01]

Fills a warehouse of its own with N KOLs (crm.salesforce_standin.discrepancies.generate_kols_sql, written into the
warehouse's `kols` table as the nightly sync leaves it: WarehouseResource.ensure_table, org 'default') and seeds a
Salesforce stand-in (HTTPS, served from this process's threads, so its memory is not the job's but its CPU shares
the cores) with the contacts plant_discrepancies_sql makes of them (`--rate` of the KOLs with a planted case).
Then, each run in a child process that runs `crm_reconciliation` as `commops reconcile` does
(commops_cli.crm_run.run_reconciliation: contacts extracted by Bulk 2.0 from the stand-in, reconciliation,
duplicate sets, reports and CSVs, the write-back plan as a dry run, the `analytics` publish):
- `first night`: into a fresh copy of the filled data directory (no reconciliation before);
- `second night`: the same data directory again after `--changed` of the contacts were updated through the
  stand-in's store (their Title; LastModifiedDate and SystemModstamp move as in Salesforce).
Each run's wall time (the job from its start, the child's imports apart, those a run makes on its way too; and the
child whole, its imports included), peak RSS (the child's own, VmHWM: the job's process), CPU seconds, Dagster's
step timings (the instance's step stats) and the result rows the reconciliation made (every row on a first night;
those whose inputs changed on a second). The duplicate-set ids of the
contacts in a set both nights must be the same (checked, the run fails otherwise). Medians of --runs, each run
changing another 1% of the contacts. Aims: 1M x 1M first night <= 60 s and <= 2 GB, second night <= 15 s.
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

from benchmarks.memory import own_peak_rss_mb  # noqa: E402

ORG = "default"
NIGHT = "2026-11-01"
CHILD = """
import time
began = time.perf_counter()
import json, resource, sys
from commops_cli.crm_run import run_reconciliation
from commops_cli.dagster_home import dagster_instance
from resources.settings import load_settings
from benchmarks.memory import own_peak_rss_mb
# What a run imports on its way (the instance's SQLite storage, simple-salesforce), imported with the rest.
import dagster._core.storage.sqlite_storage, resources.crm.salesforce
data_dir = sys.argv[1]
started = time.perf_counter()
result = run_reconciliation(data_dir=data_dir)
wall = time.perf_counter() - started
with_imports = time.perf_counter() - began
with dagster_instance(load_settings(data_dir=data_dir)) as instance:
    steps = {s.step_key: round(s.end_time - s.start_time, 2) for s in instance.get_run_step_stats(result.run_id)}
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": wall, "with_imports": with_imports, "rss_mb": own_peak_rss_mb(), "cpu": usage.ru_utime + usage.ru_stime, "steps": steps,
                  "counts": result.counts, "kols": result.kols, "contacts": result.contacts,
                  "duplicate_sets": result.duplicate_sets, "reconcile_seconds": result.duration_seconds,
                  "rows_made": result.rows_made}))
"""
# Canonical contact column -> the stand-in's API field (Account.Name makes or reuses the Account when seeding).
API_FIELDS = {"first_name": "FirstName", "last_name": "LastName", "email": "Email", "title": "Title", "phone": "Phone",
              "department": "Department", "institution": "Account.Name", "city": "MailingCity",
              "state": "MailingState", "country": "MailingCountry", "external_id": "KOL_Id__c"}


def fill(data_dir: Path, kols: int, rate: float, seed: int = 11):
    """The warehouse's `kols` (N generated KOLs, as a nightly sync leaves them) and the contacts planted from them
    (an Arrow table of the API fields, for the stand-in)."""
    from resources.warehouse import WarehouseResource
    from sync.catalog import KOLS
    from crm.salesforce_standin.discrepancies import generate_kols_sql, plant_discrepancies_sql

    warehouse = WarehouseResource(data_dir=str(data_dir), memory_limit="1GB", threads=2)
    with warehouse.writer() as session:
        conn = session.conn
        session.ensure_table(KOLS)
        generate_kols_sql(conn, "_bench_kols", kols, seed=seed)
        conn.execute(f"""INSERT INTO kols BY NAME SELECT '{ORG}' AS org, id, full_name, title, institution, department,
            [['cardiology', 'oncology', 'neurology'][1 + (hash(id) % 3)::INTEGER]] AS specialties, 'tier_2' AS tier, email, phone,
            location, is_archived, TIMESTAMPTZ '2025-01-01' AS created_at, TIMESTAMPTZ '2026-10-01' AS updated_at,
            now() AS _fetched_at, DATE '{NIGHT}' AS _snapshot_date, now() AS _loaded_at FROM _bench_kols""")
        plant_discrepancies_sql(conn, "_bench_kols", "_bench_contacts", rate, seed=seed)
        # The external-id field is unique in Salesforce: of the contacts naming one KOL id, the first keeps it.
        conn.execute("""UPDATE _bench_contacts c SET external_id = NULL FROM (SELECT crm_id, row_number() OVER (
            PARTITION BY lower(external_id) ORDER BY crm_id) AS n FROM _bench_contacts WHERE external_id IS NOT NULL) d
            WHERE d.crm_id = c.crm_id AND d.n > 1""")
        columns = ", ".join(f'{column} AS "{field}"' for column, field in API_FIELDS.items())
        contacts = conn.sql(f"SELECT {columns} FROM _bench_contacts ORDER BY crm_id").to_arrow_table()
        conn.execute("DROP TABLE _bench_kols")
        conn.execute("DROP TABLE _bench_contacts")
    return contacts


def seed_standin(directory: Path, contacts) -> object:
    from crm.salesforce_standin import SalesforceStandIn

    standin = SalesforceStandIn(directory, username="bench@example.com", password="bench-password",
                                security_token="TOKEN", request_limit=100_000_000)
    standin.start()
    for batch in contacts.to_batches(50_000):
        standin.add_contacts({k: v for k, v in row.items() if v is not None} for row in batch.to_pylist())
    return standin


def change_contacts(standin, share: float, turn: int) -> int:
    """`share` of the contacts (every 1/share-th, offset by `turn`) given another Title through the stand-in's store
    (as an API update: LastModifiedDate and SystemModstamp move). Returns how many."""
    step = max(round(1 / share), 1)
    with standin.store.lock:
        ids = sorted(standin.store.contacts)[turn % step::step]
    for contact_id in ids:
        title = standin.store.contacts[contact_id].get("Title") or "Physician"
        standin.store.update(contact_id, {"Title": f"Senior {title}"[:128]})
    return len(ids)


def run_job(data_dir: Path, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(data_dir)], cwd=ROOT, env=env, capture_output=True,
                         text=True)
    if out.returncode:
        sys.exit(f"the job failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def duplicate_sets(data_dir: Path) -> dict[str, str]:
    import duckdb

    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as conn:
        return dict(conn.execute("SELECT crm_id, duplicate_set_id FROM kol_crm_reconciliation "
                                 "WHERE duplicate_set_id IS NOT NULL").fetchall())


def steps_of(runs: list[dict]) -> dict[str, float]:
    """Median seconds of each step, and of reconcile() within crm__kol_reconciliation."""
    medians = {key: statistics.median(r["steps"][key] for r in runs) for key in runs[-1]["steps"]}
    return {**medians, "reconcile()": round(statistics.median(r["reconcile_seconds"] for r in runs), 2)}


def show(label: str, n: int, run: dict) -> None:
    steps = ", ".join(f"{key} {seconds:.1f}" for key, seconds in run["steps"].items())
    print(f"{label} run {n}: {run['wall']:.2f} s ({run['with_imports']:.2f} s with the imports), peak RSS {run['rss_mb']:.0f} MB, CPU {run['cpu']:.1f} s; "
          f"steps (s): {steps} (of which reconcile() {run['reconcile_seconds']:.1f}, making {run['rows_made']:,} "
          "result rows)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kols", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.1, help="share of KOLs with a planted discrepancy")
    parser.add_argument("--changed", type=float, default=0.01, help="share of contacts changed before the second night")
    args = parser.parse_args()
    print("command: " + " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "pristine"
        started = time.perf_counter()
        contacts = fill(pristine, args.kols, args.rate)
        filled = time.perf_counter() - started
        standin = seed_standin(Path(tmp) / "salesforce", contacts)
        print(f"setup: warehouse {filled:.1f} s, stand-in seeded with {contacts.num_rows:,} contacts in "
              f"{time.perf_counter() - started - filled:.1f} s (this process, the stand-in's, peak RSS "
              f"{own_peak_rss_mb():.0f} MB)", flush=True)
        del contacts
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SALESFORCE_LOGIN_URL": standin.login_url,
               "SALESFORCE_USERNAME": "bench@example.com", "SALESFORCE_PASSWORD": "bench-password",
               "SALESFORCE_SECURITY_TOKEN": "TOKEN", "SALESFORCE_CA_BUNDLE": str(standin.ca_bundle_path)}
        firsts, seconds, moved = [], [], 0
        try:
            for n in range(args.runs):
                data_dir = Path(tmp) / "data"
                shutil.rmtree(data_dir, ignore_errors=True)
                shutil.copytree(pristine, data_dir)
                firsts.append(run_job(data_dir, env))
                show("first night", n + 1, firsts[-1])
                before = duplicate_sets(data_dir)
                changed = change_contacts(standin, args.changed, n)
                seconds.append(run_job(data_dir, env))
                show(f"second night ({changed:,} contacts changed)", n + 1, seconds[-1])
                after = duplicate_sets(data_dir)
                moved = sum(before[c] != after[c] for c in before.keys() & after.keys())
                if moved:
                    sys.exit(f"duplicate-set ids not stable: {moved:,} contacts in a set both nights changed set id")
        finally:
            standin.stop()
        last = firsts[-1]
        print(f"kols {last['kols']:,}, contacts {last['contacts']:,}, duplicate sets {last['duplicate_sets']:,}: "
              f"{json.dumps(last['counts'])}")
        print(f"duplicate-set ids: stable across nights ({len(after):,} contacts in sets on the second night)")
        print(json.dumps({
            "kols": args.kols, "runs": args.runs,
            "first_night_seconds": round(statistics.median(r["wall"] for r in firsts), 2),
            "first_night_with_imports_seconds": round(statistics.median(r["with_imports"] for r in firsts), 2),
            "first_night_peak_rss_mb": round(max(r["rss_mb"] for r in firsts)),
            "first_night_cpu_seconds": round(statistics.median(r["cpu"] for r in firsts), 1),
            "second_night_seconds": round(statistics.median(r["wall"] for r in seconds), 2),
            "second_night_with_imports_seconds": round(statistics.median(r["with_imports"] for r in seconds), 2),
            "second_night_peak_rss_mb": round(max(r["rss_mb"] for r in seconds)),
            "second_night_cpu_seconds": round(statistics.median(r["cpu"] for r in seconds), 1),
            "first_night_steps": steps_of(firsts),
            "second_night_steps": steps_of(seconds),
        }, indent=2))


if __name__ == "__main__":
    main()
