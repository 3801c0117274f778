"""Benchmark: probable matches and duplicate sets, quality and scale.

    .venv/bin/python benchmarks/crm_matching.py quality [--kols 10000] [--seed 2] [--threshold T]
    .venv/bin/python benchmarks/crm_matching.py choose [--dev-seeds 1,3]   # the threshold, from the dev seeds pooled
    .venv/bin/python benchmarks/crm_matching.py scale [--kols 1000000] [--runs 3] [--threads 2] [--memory 1GB]
    .venv/bin/python benchmarks/crm_matching.py all --write      # both; --write keeps them in docs/benchmarks-crm-matching.json

quality: the labelled data set of benchmarks/crm_people.py (10,000 KOLs x 10,000 contacts by
default, seeded), reconciled at each threshold of a grid; prints precision (with its binomial standard error) and
recall of probable_match against the truth at each, the threshold chosen (the lowest whose precision
less one standard error is at least 0.98: the most recall the precision aim allows, with a margin for
the sample's noise, ~480 proposed pairs), then one run at the threshold (--threshold, default the matcher's own):
precision, recall, recall per kind of difference, what the false matches are, and precision and
recall of the duplicate sets (pairs of contacts put in one set).

choose: the sweep on each development seed (never seed 2, the held-out one), pooled (hits and proposed
pairs summed over the seeds), and the threshold the same rule picks on the pooled counts: more labelled
pairs than one seed, so a margin of one standard error that reflects the seed-to-seed variation better.

scale: the same generator at --kols KOLs and as many contacts, into a DuckDB file; the whole
reconciliation (email pass, probable matches, duplicate sets) timed --runs times, each in a child
process so its peak RSS (VmHWM) is its own. Aims: <= 30 s and <= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reconciliation import CHILD  # noqa: E402  one reconcile() timed in a child, the same as the email pass's

GRID = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995, 0.999)
PRECISION_AIM, RECALL_AIM = 0.98, 0.90
RESULT_JSON = ROOT / "docs" / "benchmarks-crm-matching.json"



def _pr(predicted: set, truth: set) -> tuple[float, float, int]:
    hits = len(predicted & truth)
    return (hits / len(predicted) if predicted else 1.0), (hits / len(truth) if truth else 1.0), hits


def _sweep_counts(conn, truth: set) -> dict[float, tuple[int, int]]:
    """{threshold: (true pairs proposed, pairs proposed)} over GRID: a run per threshold (which contact a KOL
    keeps, and the duplicate sets, depend on it)."""
    from crm.reconcile import reconcile

    counts = {}
    for t in GRID:
        reconcile(conn, "kols", "contacts", run_id="sweep", match_threshold=t)
        found = set(conn.execute("SELECT kol_id, crm_id FROM kol_crm_reconciliation WHERE status = 'probable_match'").fetchall())
        counts[t] = (len(found & truth), len(found))
    return counts


def _sweep_rows(counts: dict[float, tuple[int, int]], positives: int) -> tuple[list[dict], float | None]:
    """Precision (with its binomial standard error) and recall per threshold, printed, and the lowest threshold
    whose precision less one standard error is at least the aim."""
    sweep = []
    for t, (hits, found) in counts.items():
        precision, recall = (hits / found if found else 1.0), hits / positives
        margin = math.sqrt(precision * (1 - precision) / max(found, 1))
        sweep.append({"threshold": t, "precision": round(precision, 4), "recall": round(recall, 4),
                      "precision_se": round(margin, 4)})
        print(f"  threshold {t:<6} precision {precision:.4f} (standard error {margin:.4f})  recall {recall:.4f}", flush=True)
    meeting = [row["threshold"] for row in sweep if row["precision"] - row["precision_se"] >= PRECISION_AIM]
    chosen = min(meeting) if meeting else None
    print(f"lowest threshold with precision - one standard error >= {PRECISION_AIM}: {chosen}")
    return sweep, chosen


def _labelled(kols: int, seed: int):
    import duckdb

    from benchmarks.crm_people import generate

    conn = duckdb.connect()
    started = time.perf_counter()
    made = generate(conn, kols, seed)
    print(f"data set (seed {seed}): {json.dumps(made)} in {time.perf_counter() - started:.1f} s", flush=True)
    return conn, made, set(conn.execute("SELECT kol_id, crm_id FROM truth_pairs").fetchall())


def choose(kols: int, seeds: list[int]) -> dict:
    """The lowest threshold at which every development seed meets the rule on its own (seeds vary more than
    one seed's standard error says: a data set's namesakes come in draws), and the pooled figures."""
    if 2 in seeds or 4 in seeds:
        raise SystemExit("seeds 2 and 4 are held out: the threshold is never chosen on them")
    pooled: dict[float, tuple[int, int]] = {}
    positives, each = 0, []
    for seed in seeds:
        conn, _, truth = _labelled(kols, seed)
        counts = _sweep_counts(conn, truth)
        each.append(_sweep_rows(counts, len(truth))[1])
        positives += len(truth)
        pooled = {t: (pooled.get(t, (0, 0))[0] + h, pooled.get(t, (0, 0))[1] + f) for t, (h, f) in counts.items()}
    print(f"seeds {', '.join(map(str, seeds))} pooled:")
    sweep, pooled_choice = _sweep_rows(pooled, positives)
    chosen = None if None in each else max(each)
    print(f"lowest threshold meeting the rule on every seed: {chosen}")
    return {"seeds": seeds, "kols": kols, "sweep": sweep, "per_seed": dict(zip(map(str, seeds), each)),
            "pooled_choice": pooled_choice, "chosen": chosen}


def quality(kols: int, seed: int, threshold: float | None) -> dict:
    from crm import probable
    from crm.reconcile import reconcile

    conn, made, truth = _labelled(kols, seed)
    kinds = dict(((k, c), kind) for k, c, kind in conn.execute("SELECT * FROM truth_pairs").fetchall())
    sweep, chosen = _sweep_rows(_sweep_counts(conn, truth), len(truth))
    threshold = threshold if threshold is not None else probable.DEFAULT_THRESHOLD
    started = time.perf_counter()
    result = reconcile(conn, "kols", "contacts", run_id="final", match_threshold=threshold)
    seconds = time.perf_counter() - started
    found = set(conn.execute("SELECT kol_id, crm_id FROM kol_crm_reconciliation WHERE status = 'probable_match'").fetchall())
    precision, recall, hits = _pr(found, truth)
    missed = {}
    for pair in truth - found:
        for kind in kinds[pair].split(","):
            missed[kind] = missed.get(kind, 0) + 1
    totals = {}
    for pair in truth:
        for kind in kinds[pair].split(","):
            totals[kind] = totals.get(kind, 0) + 1
    false = conn.execute("""
SELECT CASE WHEN t.crm_id IS NOT NULL THEN 'right contact, other KOL'
            WHEN n.crm_id IS NOT NULL THEN 'namesake' ELSE 'other' END AS kind, count(*)
FROM kol_crm_reconciliation r
LEFT JOIN truth_pairs t ON t.crm_id = r.crm_id
LEFT JOIN (SELECT crm_id FROM contacts WHERE crm_id NOT IN (SELECT crm_id FROM truth_pairs)
           AND crm_id NOT IN (SELECT b FROM truth_duplicates)) n ON n.crm_id = r.crm_id
WHERE r.status = 'probable_match' AND (r.kol_id, r.crm_id) NOT IN (SELECT (kol_id, crm_id) FROM truth_pairs)
GROUP BY 1""").fetchall()
    dup_truth = {tuple(sorted(p)) for p in conn.execute("SELECT a, b FROM truth_duplicates").fetchall()}
    in_sets = conn.execute("""
SELECT a.crm_id, b.crm_id FROM kol_crm_reconciliation a JOIN kol_crm_reconciliation b
  ON a.duplicate_set_id = b.duplicate_set_id AND a.crm_id < b.crm_id""").fetchall()
    dup_precision, dup_recall, _ = _pr({tuple(sorted(p)) for p in in_sets}, dup_truth)
    recall_by_kind = {kind: round(1 - missed.get(kind, 0) / n, 3) for kind, n in sorted(totals.items())}
    print(f"at threshold {threshold}: probable_match precision {precision:.4f}, recall {recall:.4f} "
          f"({hits} of {len(truth)} found, {len(found) - hits} false) in {seconds:.1f} s")
    print(f"  recall per kind of difference: {json.dumps(recall_by_kind)}")
    print(f"  false matches: {json.dumps(dict(false))}; KOLs needing review {result.needs_review}")
    print(f"  duplicate sets: {result.duplicate_sets}, pair precision {dup_precision:.4f}, recall {dup_recall:.4f} "
          f"({len(dup_truth)} planted)")
    return {"seed": seed, "kols": kols, "data": made, "sweep": sweep, "lowest_threshold_meeting_precision": chosen,
            "threshold": threshold, "precision": round(precision, 4), "recall": round(recall, 4),
            "found": hits, "positives": len(truth), "false": len(found) - hits, "false_kinds": dict(false),
            "recall_by_kind": recall_by_kind, "duplicate_precision": round(dup_precision, 4),
            "duplicate_recall": round(dup_recall, 4), "duplicate_sets": result.duplicate_sets}


def scale(kols: int, runs: int, threads: int, memory: str) -> dict:
    import duckdb

    from benchmarks.crm_people import generate

    with tempfile.TemporaryDirectory(prefix="crm-matching-") as tmp:
        path = Path(tmp) / "matching.duckdb"
        started = time.perf_counter()
        conn = duckdb.connect(str(path))
        made = generate(conn, kols, seed=11)
        conn.close()
        print(f"data set: {json.dumps(made)} in {time.perf_counter() - started:.0f} s", flush=True)
        results = []
        for n in range(runs):
            out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(threads), memory], cwd=ROOT, check=True,
                                 capture_output=True, text=True)
            run = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(run)
            print(f"run {n + 1}: {run['wall']:.2f} s, CPU {run['cpu']:.1f} s, peak RSS {run['rss_mb']:.0f} MB", flush=True)
    wall = statistics.median(r["wall"] for r in results)
    rss = max(r["rss_mb"] for r in results)
    last = results[-1]
    print(f"kols {last['kols']:,}, contacts {last['contacts']:,}: {json.dumps(last['counts'])}, "
          f"duplicate sets {last['duplicate_sets']:,}")
    print(f"reconciliation with probable matches and duplicate sets, median of {runs}: {wall:.2f} s (aim <= 30 s); "
          f"peak RSS max {rss:.0f} MB (aim <= 2048 MB)")
    return {"kols": kols, "contacts": last["contacts"], "runs": [round(r["wall"], 2) for r in results],
            "cpu": [round(r["cpu"], 1) for r in results], "median_seconds": round(wall, 2), "peak_rss_mb": round(rss),
            "threads": threads, "memory_limit": memory, "counts": last["counts"], "duplicate_sets": last["duplicate_sets"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("quality", "choose", "scale", "all"))
    parser.add_argument("--kols", type=int)
    parser.add_argument("--seed", type=int, default=2, help="data set seed of the quality run (the threshold was chosen on seed 1)")
    parser.add_argument("--dev-seeds", default="1,3,5", help="choose: the development seeds the threshold is chosen on")
    parser.add_argument("--threshold", type=float)
    parser.add_argument("--runs", type=int, default=3)
    from resources.warehouse import WarehouseResource

    job = WarehouseResource.model_fields  # the crm_reconciliation job's own settings, unless told otherwise
    parser.add_argument("--threads", type=int, default=job["reconcile_threads"].default)
    parser.add_argument("--memory", default=job["reconcile_memory_limit"].default, help="DuckDB memory_limit")
    parser.add_argument("--write", action="store_true", help=f"save the figures to {RESULT_JSON.relative_to(ROOT)}")
    args = parser.parse_args()
    stamp = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
             "command": "python benchmarks/crm_matching.py " + " ".join(sys.argv[1:])}
    figures = json.loads(RESULT_JSON.read_text()) if args.write and RESULT_JSON.exists() else {}
    if args.what in ("quality", "all"):
        kols = args.kols if args.what == "quality" and args.kols else 10_000
        # seed 2 is the held-out seed the page's figures come from; another held-out seed is kept beside it
        key = "quality" if args.seed == 2 else f"quality_seed_{args.seed}"
        figures[key] = {**stamp, **quality(kols, args.seed, args.threshold)}
    if args.what == "choose":
        figures["choice"] = {**stamp, **choose(args.kols or 10_000, [int(s) for s in args.dev_seeds.split(",")])}
    if args.what in ("scale", "all"):
        kols = args.kols if args.what == "scale" and args.kols else 1_000_000
        figures["scale"] = {**stamp, **scale(kols, args.runs, args.threads, args.memory)}
    if args.write:  # each part keeps its own date and command: one can be measured again without the other
        RESULT_JSON.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"wrote {RESULT_JSON.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
