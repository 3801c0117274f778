"""Fault injection for client testing (off unless a fault rate is above 0).

One seeded random generator per process draws one number per request, in arrival
order, and that number picks at most one fault: 500, 503, 429 (with Retry-After),
a slow response (sleep fault_slow_seconds, then answer normally), a dropped
connection (closed without any response) or a truncated body (the full
Content-Length announced, half the bytes sent, connection closed). The sequence of
outcomes is reproducible from fault_seed; with concurrent clients, which request
receives which outcome depends on arrival order. /v1/openapi.json is never faulted,
and requests rejected earlier (401, rate limit) do not draw.
"""

from __future__ import annotations

import asyncio
import random
import threading

from service.errors import envelope
from service.settings import ServiceSettings

EXEMPT_PATHS = frozenset({"/v1/openapi.json"})
FAULTS = ("error_500", "error_503", "rate_limited", "slow", "drop", "truncate")


class FaultPlan:
    """The reproducible sequence: next_fault() returns one of FAULTS or None per call."""

    def __init__(self, settings: ServiceSettings):
        self._rng = random.Random(settings.fault_seed)
        self._lock = threading.Lock()
        self._bands = []
        edge = 0.0
        for name, rate in zip(
            FAULTS,
            (
                settings.fault_500_rate,
                settings.fault_503_rate,
                settings.fault_429_rate,
                settings.fault_slow_rate,
                settings.fault_drop_rate,
                settings.fault_truncate_rate,
            ),
        ):
            edge += max(0.0, rate)
            self._bands.append((edge, name))
        if edge > 1.0:
            raise ValueError(f"fault rates add up to {edge:.3f}; their sum must be at most 1")

    def next_fault(self) -> str | None:
        with self._lock:
            draw = self._rng.random()
        for edge, name in self._bands:
            if draw < edge:
                return name
        return None


class FaultInjector:
    """ASGI middleware applying FaultPlan to each request."""

    def __init__(self, app, settings: ServiceSettings):
        self.app = app
        self.plan = FaultPlan(settings)
        self.slow_seconds = settings.fault_slow_seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        fault = self.plan.next_fault()
        if fault is None:
            await self.app(scope, receive, send)
        elif fault == "error_500":
            await envelope(500, "internal_error", "Internal server error (injected fault)")(scope, receive, send)
        elif fault == "error_503":
            response = envelope(503, "service_unavailable", "Service temporarily unavailable (injected fault)",
                                headers={"Retry-After": "1"})
            await response(scope, receive, send)
        elif fault == "rate_limited":
            response = envelope(429, "rate_limited", "Request rate limit exceeded (injected fault); retry in 1 s",
                                {"retry_after": 1}, {"Retry-After": "1"})
            await response(scope, receive, send)
        elif fault == "slow":
            await asyncio.sleep(self.slow_seconds)
            await self.app(scope, receive, send)
        elif fault == "drop":
            await _close_connection(scope)
        elif fault == "truncate":
            await self._truncated(scope, receive, send)

    async def _truncated(self, scope, receive, send):
        start: dict = {}
        chunks: list[bytes] = []

        async def capture(message):
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        body = b"".join(chunks)
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": start.get("status", 200), "headers": headers})
        await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
        await _close_connection(scope)


async def _close_connection(scope) -> None:
    """Close the client connection under the server's feet (uvicorn's transport)."""
    raw_send = scope.get("commops.raw_send")
    cycle = getattr(raw_send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        raise ConnectionAbortedError("injected fault: dropped connection")
    transport.close()
    # Let the server notice the disconnect, so it does not try to answer 500 itself.
    for _ in range(100):
        if getattr(cycle, "disconnected", True):
            return
        await asyncio.sleep(0.001)
