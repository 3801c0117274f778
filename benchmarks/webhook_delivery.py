"""Webhook delivery benchmark: throughput and change-to-receipt latency to a fast local receiver.

    .venv/bin/python benchmarks/webhook_delivery.py [--events 2000] [--rate 200] [--seconds 5] [--runs 3]

Each run uses a fresh SQLite database with one organization and one webhook pointing at a
uvicorn receiver in another process (so it does not share the worker's GIL):
- throughput: `--events` events are emitted while no worker runs (a backlog, as after a
  restart), then a DeliveryWorker is started; events/s = events / time until the receiver
  has them all.
- latency: with the worker running, events are emitted at `--rate` per second for
  `--seconds`; latency = receipt time at the receiver - commit time of the change.
Prints each run and the medians over runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.local import create_local_service  # noqa: E402
from service.store import outbox  # noqa: E402
from service.store import webhooks as store  # noqa: E402
from service.store.db import connect, transaction  # noqa: E402
from service.webhooks.config import WebhookConfig  # noqa: E402
from service.webhooks.delivery import DeliveryWorker  # noqa: E402

KOL = {
    "id": "kol_bench",
    "full_name": "Dr. Elena Marquez",
    "specialties": ["interventional_cardiology"],
    "tier": "tier_1",
    "institution": "Mayo Clinic",
    "location": {"city": "Rochester", "state": "MN", "country": "US"},
}


# ---------------------------------------------------------------- the receiver (its own process)


def _serve_receiver(port: int) -> None:
    import uvicorn

    received: dict[str, float] = {}

    async def app(scope, receive, send):  # a bare ASGI app: as fast a receiver as Python gets
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        if scope["method"] == "POST":
            headers = dict(scope["headers"])
            received[headers[b"webhook-id"].decode()] = time.time()
            body = b"{}"
        else:
            body = json.dumps(received).encode()
            if scope["path"] == "/reset":
                received.clear()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------- one run


def _setup(directory: Path, url: str) -> tuple[Path, str]:
    local = create_local_service(directory / "service.db", org_name="Bench Medtech")
    conn = connect(local.db_path)
    with transaction(conn):
        store.create_webhook(conn, local.org_id, url, ["kol.updated"], "bench-secret-0123456789")
    conn.close()
    return local.db_path, local.org_id


def _emit(conn, org_id: str, n: int) -> tuple[str, float]:
    with transaction(conn):
        event_id = outbox.emit(conn, org_id, "kol.updated", {**KOL, "n": n})
    return event_id, time.time()


def _received(base: str) -> dict[str, float]:
    return httpx.get(f"{base}/received", timeout=30).json()


def _wait_for(base: str, ids: set[str], timeout: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        got = _received(base)
        if ids <= got.keys():
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(ids & got.keys())} of {len(ids)} events arrived within {timeout} s")
        time.sleep(0.05)


def run_once(base: str, events: int, rate: float, seconds: float, poll: float) -> dict[str, float]:
    httpx.get(f"{base}/reset", timeout=10)
    with tempfile.TemporaryDirectory() as tmp:
        db, org_id = _setup(Path(tmp), f"{base}/hook")
        config = WebhookConfig(db=db, poll_interval_seconds=poll, allow_private=True)  # the receiver is on loopback
        conn = connect(db)

        backlog = {_emit(conn, org_id, n)[0] for n in range(events)}
        worker = DeliveryWorker(config)
        started = time.time()
        worker.start()
        got = _wait_for(base, backlog, timeout=300)
        throughput = events / (max(got[i] for i in backlog) - started)

        committed: dict[str, float] = {}
        interval = 1.0 / rate
        next_at = time.monotonic()
        for n in range(int(rate * seconds)):
            event_id, at = _emit(conn, org_id, n)
            committed[event_id] = at
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        got = _wait_for(base, set(committed), timeout=60)
        worker.stop()
        conn.close()
    latencies = sorted((got[i] - committed[i]) * 1000 for i in committed)
    return {
        "events_per_s": throughput,
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2000, help="backlog size for the throughput figure")
    parser.add_argument("--rate", type=float, default=200, help="events per second for the latency figure")
    parser.add_argument("--seconds", type=float, default=5, help="duration of the latency phase")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--poll", type=float, default=WebhookConfig.poll_interval_seconds,
                        help="worker poll interval (the service default unless given)")
    args = parser.parse_args()

    port = _free_port()
    receiver = multiprocessing.get_context("spawn").Process(target=_serve_receiver, args=(port,), daemon=True)
    receiver.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{base}/received", timeout=1)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise SystemExit("the receiver did not start") from None
            time.sleep(0.05)

    results = []
    try:
        for run in range(1, args.runs + 1):
            result = run_once(base, args.events, args.rate, args.seconds, args.poll)
            results.append(result)
            print(
                f"run {run}: {result['events_per_s']:.0f} events/s (backlog of {args.events}); "
                f"latency at {args.rate:g}/s: p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms",
                flush=True,
            )
    finally:
        receiver.terminate()
        receiver.join(5)
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(
        f"median of {args.runs}: {median['events_per_s']:.0f} events/s; "
        f"change-to-receipt p50 {median['p50_ms']:.1f} ms, p99 {median['p99_ms']:.1f} ms "
        f"(poll interval {args.poll:g} s)"
    )


if __name__ == "__main__":
    main()
