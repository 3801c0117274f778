"""Receiver benchmark: signed events committed durably per second, with p50/p99 latency.

    .venv/bin/python benchmarks/receiver_throughput.py [--events 3000] [--clients 16] [--runs 3] [--kinds ...] [--write]

Each measurement starts its receivers (uvicorn, a process each, fresh data dirs) and has `--clients`
concurrent keep-alive connections over loopback POST `--events` distinct signed events; latency is
send-to-2xx per request. The kinds, measured in turn in every run with the same client:
- baseline: the receiver app (cap, signature, JSON checks) whose committer stores nothing;
- sqlite: the real receiver on its SQLite inbox (WAL, synchronous=FULL), the default;
- postgres-1: one receiver on a Postgres inbox (COMMOPS_INBOX_URL), through haproxy;
- postgres-2: two receivers sharing that Postgres inbox, through haproxy (round robin), as
  receivers on two hosts behind a load balancer would.
Postgres is a local server with fsync on (tests/postgres.py, durable), a fresh database per
measurement; haproxy is Debian's (tests/haproxy.py). Without either, their kinds are reported as not
measured. Every measurement checks the inbox holds each event once. The client is a bare asyncio
HTTP/1.1 client, so the figures measure the receivers rather than the client; on one machine the
client, haproxy, Postgres and the receivers share its cores. Prints each run, the medians and the
ratios of medians; `--write` keeps them in docs/benchmarks-receivers.json, which `python -m benchmarks`
renders as a section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT_JSON = ROOT / "docs" / "benchmarks-receivers.json"
sys.path.insert(0, str(ROOT))

from webhooks.signatures import sign  # noqa: E402

SECRET = "bench-" + "0" * 58


class _NullCommitter:
    """Stores nothing: the baseline."""

    alive = True

    def start(self) -> None: ...

    def stop(self) -> None: ...

    async def submit(self, raw: bytes, envelope: object) -> bool:
        return True


def _serve(kind: str, port: int, data_dir: str, inbox_url: str | None, ready) -> None:
    from http_serving.server import serve
    from http_serving.sockets import bind
    from webhooks.receiver.app import create_app
    from webhooks.receiver.server import open_app
    from webhooks.receiver.settings import ReceiverSettings

    settings = ReceiverSettings(webhook_secrets=SECRET, data_dir=Path(data_dir), inbox_url=inbox_url)
    app = create_app(settings, committer=_NullCommitter()) if kind == "baseline" else open_app(settings)
    sock = bind("127.0.0.1", port)
    ready.set()
    serve(app, sock, log_level="error")


def _events(count: int) -> list[bytes]:
    requests = []
    for i in range(count):
        body = json.dumps({
            "id": f"wh_evt_{uuid.uuid4().hex}", "event": "kol.updated", "created_at": "2026-05-01T12:00:00.000000Z",
            "organization_id": "org_bench",
            "data": {"id": f"kol_{i:08d}", "full_name": "Dr. Elena Marquez", "tier": "tier_1",
                     "specialties": ["interventional_cardiology"], "institution": "Mayo Clinic",
                     "location": {"city": "Rochester", "state": "MN", "country": "US"}},
        }).encode()
        head = (f"POST /webhooks/commops HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nx-service-signature: {sign(SECRET, body)}\r\n\r\n").encode()
        requests.append(head + body)
    return requests


async def _client(port: int, queue: list[bytes], latencies: list[float], failures: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while queue:
            request = queue.pop()
            started = time.perf_counter()
            writer.write(request)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if status_line.split()[1] != b"200":
                failures.append(int(status_line.split()[1]))
    finally:
        writer.close()


async def _drive(port: int, requests: list[bytes], clients: int) -> tuple[float, list[float], list[int]]:
    queue = list(reversed(requests))
    latencies: list[float] = []
    failures: list[int] = []
    started = time.perf_counter()
    await asyncio.gather(*(_client(port, queue, latencies, failures) for _ in range(clients)))
    return time.perf_counter() - started, latencies, failures


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


KINDS = {  # kind: (receivers, on Postgres, label)
    "baseline": (1, False, "baseline (no inbox write)"),
    "sqlite": (1, False, "SQLite inbox, 1 receiver"),
    "postgres-1": (1, True, "Postgres, 1 receiver, haproxy"),
    "postgres-2": (2, True, "Postgres, 2 receivers, haproxy"),
}
WARM_UP = 200


def measure(kind: str, events: int, clients: int, postgres) -> dict[str, float]:
    receivers, on_postgres, _ = KINDS[kind]
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as data_dir, ExitStack() as stack:
        inbox_url = postgres.create_database(f"bench_{uuid.uuid4().hex[:12]}") if on_postgres else None
        ports = [_free_port() for _ in range(receivers)]
        for n, port in enumerate(ports):
            ready = ctx.Event()
            server = ctx.Process(target=_serve, args=(kind, port, f"{data_dir}/host{n}", inbox_url, ready), daemon=True)
            server.start()
            stack.callback(server.join, 10)
            stack.callback(server.terminate)
            if not ready.wait(30):
                raise SystemExit(f"the {kind} receiver did not start")
        port = ports[0]
        if on_postgres:
            from tests.haproxy import running_haproxy

            port = stack.enter_context(running_haproxy(ports)).port
        asyncio.run(_drive(port, _events(WARM_UP), clients))  # warm-up (connections, imports)
        elapsed, latencies, failures = asyncio.run(_drive(port, _events(events), clients))
        if failures:
            raise SystemExit(f"{kind}: {len(failures)} non-200 answers, e.g. {failures[:3]}")
        if kind != "baseline":
            from resources.inbox import Inbox, inbox_path

            stored = Inbox(inbox_url or inbox_path(f"{data_dir}/host0")).counts()["total"]
            assert stored == events + WARM_UP, f"{kind}: {stored} stored of {events + WARM_UP}"
    latencies.sort()
    return {
        "events_per_s": events / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def _unavailable(kinds: list[str]) -> dict[str, str]:
    """{kind: why it cannot be measured here} for the Postgres kinds on a machine without Postgres or haproxy."""
    if not any(KINDS[kind][1] for kind in kinds):
        return {}
    from tests.haproxy import HaproxyUnavailable, find_haproxy
    from tests.postgres import PostgresUnavailable, find_bin_dir

    try:
        find_bin_dir()
        find_haproxy()
    except (PostgresUnavailable, HaproxyUnavailable) as missing:
        return {kind: str(missing) for kind in kinds if KINDS[kind][1]}
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000, help="signed events per measurement")
    parser.add_argument("--clients", type=int, default=16, help="concurrent keep-alive connections")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {','.join(KINDS)} (default: all)")
    parser.add_argument("--write", action="store_true", help=f"save the figures to {RESULT_JSON.relative_to(ROOT)}")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: Postgres, haproxy and receivers stop too
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"--kinds: unknown {', '.join(sorted(unknown))}; choose from {', '.join(KINDS)}")
    skipped = _unavailable(kinds)
    kinds = [kind for kind in kinds if kind not in skipped]
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    load_before = os.getloadavg()[0]  # other work on the machine shares the cores with every process measured
    with ExitStack() as stack:
        postgres = None
        if any(KINDS[kind][1] for kind in kinds):
            from tests.postgres import running_postgres

            postgres = stack.enter_context(running_postgres(durable=True))
        for run in range(1, args.runs + 1):
            for kind in kinds:
                figures = measure(kind, args.events, args.clients, postgres)
                results[kind].append(figures)
                print(f"run {run} {kind:10}: {figures['events_per_s']:7,.0f} events/s  p50 {figures['p50_ms']:6.2f} ms  "
                      f"p99 {figures['p99_ms']:6.2f} ms", flush=True)
    medians = {kind: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for kind, runs in results.items()}
    print(f"\nmedians of {args.runs} runs, {args.events} events, {args.clients} clients over loopback "
          f"(1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} cores):")
    for kind in kinds:
        m = medians[kind]
        print(f"  {KINDS[kind][2]:31}: {m['events_per_s']:7,.0f} events/s  p50 {m['p50_ms']:6.2f} ms  p99 {m['p99_ms']:6.2f} ms")
    for kind, why in skipped.items():
        print(f"  {KINDS[kind][2]:31}: not measured ({why})")
    ratios = [(a, b) for a, b in (("sqlite", "baseline"), ("postgres-1", "sqlite"), ("postgres-2", "postgres-1"))
              if a in medians and b in medians]
    ratio = {f"{a} / {b}": round(medians[a]["events_per_s"] / medians[b]["events_per_s"], 2) for a, b in ratios}
    if ratio:
        print("  throughput ratios: " + ", ".join(f"{name} {value:.2f}" for name, value in ratio.items()))
    if args.write:
        figures = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": shlex.join(["python", "benchmarks/receiver_throughput.py", *sys.argv[1:]]),
            "events": args.events, "clients": args.clients, "runs": args.runs, "cores": os.cpu_count(),
            "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
            "kinds": {kind: {"label": KINDS[kind][2], "runs_events_per_s": [round(r["events_per_s"]) for r in results[kind]],
                             **{k: round(v, 2) for k, v in medians[kind].items()}} for kind in kinds},
            "not_measured": skipped, "ratios": ratio,
        }
        RESULT_JSON.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"wrote {RESULT_JSON.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
