"""Receiver benchmark: signed events committed durably per second, with p50/p99 latency.

    .venv/bin/python benchmarks/receiver_throughput.py [--events 3000] [--clients 16] [--runs 3]

Each run starts a receiver (uvicorn, its own process, fresh data dir) and has `--clients`
concurrent keep-alive connections over loopback POST `--events` distinct signed events;
latency is send-to-2xx per request. Two receivers are measured in the same run with the
same client:
- inbox: the real receiver, answering after the durable group commit (WAL, synchronous=FULL);
- baseline: the same app (cap, signature, JSON checks) whose committer stores nothing.
The ratio shows what the inbox costs. The client is a bare asyncio HTTP/1.1 client, so the
figures measure the receiver rather than the client. Prints each run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from webhook_receiver.signatures import sign  # noqa: E402

SECRET = "bench-" + "0" * 58


class _NullCommitter:
    """Stores nothing: the baseline."""

    alive = True

    def start(self) -> None: ...

    def stop(self) -> None: ...

    async def submit(self, raw: bytes, envelope: object) -> bool:
        return True


def _serve(kind: str, port: int, data_dir: str, ready) -> None:
    from http_serving.server import serve
    from http_serving.sockets import bind
    from webhook_receiver.app import create_app
    from webhook_receiver.server import open_app
    from webhook_receiver.settings import ReceiverSettings

    settings = ReceiverSettings(webhook_secrets=SECRET, data_dir=Path(data_dir))
    app = open_app(settings) if kind == "inbox" else create_app(settings, committer=_NullCommitter())
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


def measure(kind: str, events: int, clients: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as data_dir:
        port, ready = _free_port(), ctx.Event()
        server = ctx.Process(target=_serve, args=(kind, port, data_dir, ready), daemon=True)
        server.start()
        try:
            if not ready.wait(30):
                raise SystemExit(f"the {kind} receiver did not start")
            asyncio.run(_drive(port, _events(200), clients))  # warm-up (connections, imports)
            requests = _events(events)
            elapsed, latencies, failures = asyncio.run(_drive(port, requests, clients))
        finally:
            server.terminate()
            server.join(10)
        if failures:
            raise SystemExit(f"{kind}: {len(failures)} non-200 answers, e.g. {failures[:3]}")
        if kind == "inbox":
            from webhook_receiver.inbox import Inbox

            stored = Inbox(Path(data_dir) / "inbox" / "webhooks.db").counts()["total"]
            assert stored == events + 200, f"{stored} stored of {events + 200}"
    latencies.sort()
    return {
        "events_per_s": events / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000, help="signed events per measurement")
    parser.add_argument("--clients", type=int, default=16, help="concurrent keep-alive connections")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"baseline": [], "inbox": []}
    for run in range(1, args.runs + 1):
        for kind in ("baseline", "inbox"):
            figures = measure(kind, args.events, args.clients)
            results[kind].append(figures)
            print(f"run {run} {kind:8}: {figures['events_per_s']:7,.0f} events/s  p50 {figures['p50_ms']:6.2f} ms  "
                  f"p99 {figures['p99_ms']:6.2f} ms", flush=True)
    medians = {kind: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for kind, runs in results.items()}
    print(f"\nmedians of {args.runs} runs, {args.events} events, {args.clients} clients over loopback:")
    for kind, label in (("baseline", "baseline (no inbox write)"), ("inbox", "inbox (durable commit)")):
        m = medians[kind]
        print(f"  {label:26}: {m['events_per_s']:7,.0f} events/s  p50 {m['p50_ms']:6.2f} ms  p99 {m['p99_ms']:6.2f} ms")
    ratio = medians["inbox"]["events_per_s"] / medians["baseline"]["events_per_s"]
    print(f"  inbox / baseline throughput: {ratio:.2f}")


if __name__ == "__main__":
    main()
