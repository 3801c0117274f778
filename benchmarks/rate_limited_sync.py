"""Benchmark: paging under a plan's rate limit in a short window.

Seeds KOLs into a local service with rate limits on (a short window, e.g. 2 s for the "minute"), then
walks /kols repeatedly with ONE ApiClient (one budget), recording every response. For each server window
(the X-RateLimit-Reset value a response carries) it counts the requests the server accepted; the windows
fully inside the run give the achieved requests per window as a fraction of the plan's limit (aim >= 0.95),
and 429s are counted separately for the first window and after it (aim 0 after the first window).

    .venv/bin/python benchmarks/rate_limited_sync.py --plan professional --window 2 --runs 3
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commops_spec.constants import PLANS  # noqa: E402
from resources.commops_api import ApiClient  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", default="professional", choices=sorted(PLANS))
    parser.add_argument("--window", type=float, default=2.0, help="rate window in seconds (the plan's minute)")
    parser.add_argument("--kols", type=int, default=3000)
    parser.add_argument("--per-page", type=int, default=20)
    parser.add_argument("--requests", type=int, default=1500, help="requests per run (rounded up to whole walks)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    limit = PLANS[args.plan]["per_minute"]
    with tempfile.TemporaryDirectory(prefix="commops-rate-bench-") as directory:
        server, base_url, api_key = start_service(Path(directory), args)
        try:
            results = [one_run(base_url, api_key, args, limit) for _ in range(args.runs)]
        finally:
            server.stop()

    print(f"\nplan {args.plan}: {limit} requests per {args.window:g} s window, concurrency {args.concurrency}, "
          f"{args.runs} runs")
    for number, result in enumerate(results, 1):
        print(f"  run {number}: {result['requests']} requests in {result['seconds']:.1f} s, "
              f"full windows {result['full_windows']}, per-window fraction {fmt(result['fractions'])}, "
              f"429s first window {result['first_window_429s']}, after {result['later_429s']}, "
              f"throttled {result['throttled_seconds']:.1f} s")
    print(f"median achieved requests per window / limit: "
          f"{statistics.median(statistics.median(r['fractions']) for r in results):.3f}  (aim >= 0.95)")
    print(f"median 429s after the first window: {statistics.median(r['later_429s'] for r in results)}  (aim 0)")
    print(f"median 429s in the first window: {statistics.median(r['first_window_429s'] for r in results)}")


def start_service(directory: Path, args: argparse.Namespace):
    from service.local import create_local_service, serve

    started = time.monotonic()
    local = create_local_service(directory / "service.db", org_name="Benchmark Devices", plan=args.plan,
                                 kols=args.kols)
    print(f"seeded {args.kols} KOLs in {time.monotonic() - started:.1f} s")
    server = serve(local.db_path, rate_limits_enabled=True, rate_window_seconds=args.window)
    return server, server.base_url, local.api_key


def one_run(base_url: str, api_key: str, args: argparse.Namespace, limit: int) -> dict:
    accepted: Counter[int] = Counter()  # server window (its reset value) -> requests it served
    rejected: Counter[int] = Counter()
    lock = threading.Lock()

    def record(response: httpx.Response) -> None:
        reset = int(response.headers.get("x-ratelimit-reset", 0))
        with lock:
            (rejected if response.status_code == 429 else accepted)[reset] += 1

    started = time.monotonic()
    with ApiClient(base_url, api_key, per_page=args.per_page, max_concurrency=args.concurrency,
                   on_response=record) as client:
        while client.stats.requests < args.requests:  # whole walks, one budget
            for _page in client.walk("/kols").pages():
                pass
        stats = client.stats
    seconds = time.monotonic() - started

    windows = sorted(set(accepted) | set(rejected))
    full = windows[1:-1]  # the first window started before the run, the last one ran out of work
    return {
        "requests": stats.requests,
        "seconds": seconds,
        "full_windows": len(full),
        "fractions": [accepted[w] / limit for w in full] or [math.nan],
        "first_window_429s": rejected[windows[0]] if windows else 0,
        "later_429s": sum(rejected[w] for w in windows[1:]),
        "throttled_seconds": stats.throttled_seconds,
    }


def fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    main()
