"""How much of a child's fetch had no request in flight: the time the server was left waiting by the client.

`record_requests()` times every request an httpx.Client sends (from sending to the body read, on whichever
thread sends it); `idle_share()` is the part of the span from the first request's start to the last one's end
that no request covered. A loop that keeps N requests in flight has none; a client whose fetch waits on its own
work (a row group written, a step started) shows it here.
"""

from __future__ import annotations

import time

import httpx


def record_requests() -> list[tuple[float, float]]:
    """Time every request sent by any httpx.Client from now on; returns the list the (start, end) pairs go to."""
    spans: list[tuple[float, float]] = []
    send = httpx.Client.send

    def timed(self: httpx.Client, request: httpx.Request, **options):
        started = time.perf_counter()
        try:
            return send(self, request, **options)
        finally:
            spans.append((started, time.perf_counter()))

    httpx.Client.send = timed
    return spans


def idle_share(spans: list[tuple[float, float]]) -> float:
    """The share of [first start, last end] that no span covers."""
    if not spans:
        return 0.0
    ordered = sorted(spans)
    covered, reach = 0.0, ordered[0][0]
    for start, end in ordered:
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    whole = reach - ordered[0][0]
    return 1 - covered / whole if whole > 0 else 0.0
