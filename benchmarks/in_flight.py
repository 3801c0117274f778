"""How much of a child's fetch had no request in flight: the time the server was left waiting by the client.

`record_requests()` times every request an httpx.Client sends (from sending to the body read, on whichever
thread sends it); `idle_share()` is the part of the span from the first request's start to the last one's end
that no request covered, and `pauses()` its longer stretches. A loop that keeps N requests in flight has none;
a client whose fetch waits on its own work (a row group written, a step started) shows it here.
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
    whole = max(end for _, end in spans) - min(start for start, _ in spans)
    return sum(_idle(spans)) / whole if whole > 0 else 0.0


PAUSE = 0.02  # seconds with no request in flight that count as a pause: a step's end and start, not a slow response


def pauses(spans: list[tuple[float, float]], longer_than: float = PAUSE) -> list[float]:
    """The stretches no span covers that last longer than `longer_than` seconds (a run between two lists)."""
    return [gap for gap in _idle(spans) if gap > longer_than]


def _idle(spans: list[tuple[float, float]]) -> list[float]:
    """Each stretch from the first start to the last end that no span covers, in seconds."""
    gaps, reach = [], None
    for start, end in sorted(spans):
        if reach is not None and start > reach:
            gaps.append(start - reach)
        reach = end if reach is None else max(reach, end)
    return gaps
