"""Benchmark: seed 100,000 KOLs, then page through all of them at per_page=100 with a concurrent client.

    .venv/bin/python benchmarks/service_paging.py                  # 100k KOLs, 3 walks, 8 requests in flight
    .venv/bin/python benchmarks/service_paging.py --kols 20000 --runs 1

Prints the seed time (the whole proportionate dataset: KOLs with their events, interactions,
publications and campaign deliveries, plus campaigns, products, signals), then for every walk:
total time, pages/s, p50/p99 latency of the first 50 and of the deepest 50 pages, and checks
that the distinct ids seen equal meta.total (no row repeated or skipped). Medians over the runs last.
Then the search latencies: each query of SEARCHES (KOLs and signals; common, rare, non-ASCII,
upper-case and matchless terms, a deep page) is sent `--search-rounds` times one after the
other; the median of each query and the median over all queries are printed.

The service runs in a child process by default (`ServiceServer` with rate limits off), so the
client and the server do not share one interpreter lock; --in-process runs it in a thread instead.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.local import create_local_service  # noqa: E402
from service.server import ServiceServer  # noqa: E402
from service.settings import ServiceSettings  # noqa: E402

EDGE = 50  # pages measured at each end of the walk


def main() -> None:
    args = _parse_args()
    if args.db:
        _run(args, Path(args.db))
        return
    with tempfile.TemporaryDirectory(prefix="commops-paging-") as workdir:
        _run(args, Path(workdir) / "service.db")


def _run(args: argparse.Namespace, db_path: Path) -> None:
    started, cpu_started = time.perf_counter(), time.process_time()
    local = create_local_service(db_path, org_name="Benchmark Medical", scopes=["kols:read", "signals:read"],
                                 kols=args.kols, campaigns=args.campaigns, products=args.products,
                                 signals=args.signals, events=args.events, random_seed=args.random_seed)
    key, counts = local.api_key, local.seeded
    seed_seconds, seed_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    rows = sum(counts.values())
    print(f"seed: {counts['kols']:,} KOLs and their related data ({rows:,} rows in all) in {seed_seconds:.1f} s "
          f"({seed_cpu:.1f} s CPU; wall time above CPU time is waiting for a core or the disk)")

    with _service(db_path, in_process=args.in_process) as base_url:
        results = [asyncio.run(_walk(base_url, key, args.per_page, args.concurrency)) for _ in range(args.runs)]
        searches = _searches(base_url, key, args.search_rounds) if args.search_rounds else {}
    for number, result in enumerate(results, 1):
        print(f"walk {number}: {_describe(result)}")
    print(f"median of {len(results)}: " + _describe({
        name: statistics.median(r[name] for r in results) for name in results[0] if name not in ("pages", "kols")
    } | {"pages": results[0]["pages"], "kols": results[0]["kols"]}))
    for (path, params), (median_ms, total) in searches.items():
        print(f"search {path} {params}: median {median_ms:.1f} ms over {args.search_rounds} rounds, total {total:,}")
    if searches:
        overall = statistics.median(median_ms for median_ms, _ in searches.values())
        print(f"search median of the {len(searches)} query medians: {overall:.1f} ms")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kols", type=int, default=100_000)
    parser.add_argument("--campaigns", type=int, default=5_000)
    parser.add_argument("--products", type=int, default=500)
    parser.add_argument("--signals", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=2_000)
    parser.add_argument("--random-seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3, help="walks over all pages (medians are printed)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--per-page", type=int, default=100)
    parser.add_argument("--db", help="database file to create (default: a new temporary directory)")
    parser.add_argument("--in-process", action="store_true", help="run the service in a thread of this process")
    parser.add_argument("--search-rounds", type=int, default=7, help="times each search query is sent (0: none)")
    return parser.parse_args()


class _service:
    """The service on a free loopback port, in a child process (default) or a thread; yields base_url."""

    def __init__(self, db_path: Path, *, in_process: bool):
        self.settings = ServiceSettings(db=db_path, rate_limits_enabled=False, webhook_worker_enabled=False)
        self.in_process = in_process

    def __enter__(self) -> str:
        if self.in_process:
            self.server = ServiceServer(self.settings).start()
            return self.server.base_url
        context = multiprocessing.get_context("spawn")
        ready = context.Queue()
        self.stop_event = context.Event()
        self.process = context.Process(target=_serve, args=(self.settings, ready, self.stop_event), daemon=True)
        self.process.start()
        return ready.get(timeout=60)

    def __exit__(self, *exc_info) -> None:
        if self.in_process:
            self.server.stop()
            return
        self.stop_event.set()
        self.process.join(timeout=30)


def _serve(settings: ServiceSettings, ready, stop_event) -> None:
    with ServiceServer(settings) as server:
        ready.put(server.base_url)
        stop_event.wait()


async def _walk(base_url: str, key: str, per_page: int, concurrency: int) -> dict:
    """Fetch every page of the active KOLs and of the archived ones (is_archived=true), so
    that the walk covers every KOL; latencies at the edges are those of the active listing."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=30) as client:
        totals = {}
        for archived in ("false", "true"):
            first = await client.get("/kols", params={"per_page": 1, "is_archived": archived})
            first.raise_for_status()
            totals[archived] = first.json()["meta"]["total"]
        requests = [(archived, page) for archived, total in totals.items()
                    for page in range(1, max(1, math.ceil(total / per_page)) + 1)]
        latency: dict[tuple[str, int], float] = {}
        ids: set[str] = set()
        gate = asyncio.Semaphore(concurrency)

        async def fetch(archived: str, page: int) -> None:
            async with gate:
                sent = time.perf_counter()
                response = await client.get("/kols", params={"per_page": per_page, "page": page,
                                                             "is_archived": archived})
                latency[archived, page] = time.perf_counter() - sent
            response.raise_for_status()
            ids.update(item["id"] for item in response.json()["data"])

        started = time.perf_counter()
        await asyncio.gather(*(fetch(archived, page) for archived, page in requests))
        elapsed = time.perf_counter() - started
    if len(ids) != sum(totals.values()):
        raise SystemExit(f"paging is not exact: {len(ids):,} distinct ids for meta.total {sum(totals.values()):,}")
    active_pages = max(1, math.ceil(totals["false"] / per_page))
    first_pages = [latency["false", p] for p in range(1, min(EDGE, active_pages) + 1)]
    deep_pages = [latency["false", p] for p in range(max(1, active_pages - EDGE + 1), active_pages + 1)]
    return {
        "kols": len(ids),
        "pages": len(requests),
        "seconds": elapsed,
        "pages_per_second": len(requests) / elapsed,
        "first_p50_ms": _percentile(first_pages, 50) * 1000,
        "first_p99_ms": _percentile(first_pages, 99) * 1000,
        "deep_p50_ms": _percentile(deep_pages, 50) * 1000,
        "deep_p99_ms": _percentile(deep_pages, 99) * 1000,
    }


# (path, query) pairs: a frequent and a rare name part, an institution word, non-ASCII text in
# two cases, an email domain, a term matching nothing (a full scan), a deep page of a frequent term.
SEARCHES = (
    ("/kols", {"search": "an"}),
    ("/kols", {"search": "Zimmermann"}),
    ("/kols", {"search": "Herzzentrum"}),
    ("/kols", {"search": "Müller"}),
    ("/kols", {"search": "MÜLLER"}),
    ("/kols", {"search": "charite.de"}),
    ("/kols", {"search": "qqzzxx"}),
    ("/kols", {"search": "an", "page": "200"}),
    ("/signals", {"search": "recall"}),
    ("/signals", {"search": "qqzzxx"}),
)


def _searches(base_url: str, key: str, rounds: int) -> dict[tuple[str, str], tuple[float, int]]:
    """(path, query) -> (median latency in ms, meta.total), each query sent `rounds` times in turn."""
    samples: dict[tuple[str, str], list[float]] = {}
    totals: dict[tuple[str, str], int] = {}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        for _ in range(rounds):
            for path, params in SEARCHES:
                label = (path, "&".join(f"{k}={v}" for k, v in params.items()))
                sent = time.perf_counter()
                response = client.get(path, params={"per_page": 100, **params})
                samples.setdefault(label, []).append(time.perf_counter() - sent)
                response.raise_for_status()
                totals[label] = response.json()["meta"]["total"]
    return {label: (statistics.median(values) * 1000, totals[label]) for label, values in samples.items()}


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1)]


def _describe(r: dict) -> str:
    return (f"{r['kols']:,} KOLs, {r['pages']:,} pages in {r['seconds']:.2f} s ({r['pages_per_second']:.0f} pages/s); "
            f"first {EDGE} pages p50 {r['first_p50_ms']:.1f} ms p99 {r['first_p99_ms']:.1f} ms; "
            f"deepest {EDGE} pages p50 {r['deep_p50_ms']:.1f} ms p99 {r['deep_p99_ms']:.1f} ms; "
            f"distinct ids = total")


if __name__ == "__main__":
    main()
