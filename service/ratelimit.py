"""Per-organization request limits (part 8) and the request gate that applies them.

Counters are fixed windows aligned to multiples of the window length since the Unix
epoch (a 60 s window resets on the minute), kept in memory per process: restarting
the service resets them, and two processes would count separately.

Every response carries X-RateLimit-Limit (requests per minute window of the plan),
X-RateLimit-Remaining (left in the minute window, or in the day window when that is
lower) and X-RateLimit-Reset (Unix epoch seconds at which the minute window resets).
Requests that fail authentication (no key, an unknown key or a revoked key) are
counted per client address in a bucket of their own with the starter plan's limits,
never against an organization: a leaked, revoked key cannot exhaust its former
organization's budget. Their 401s carry that bucket's headers, and once the bucket
is exhausted they are answered 429 (with Retry-After) instead. Rejected requests
(429) do not consume the budget.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

from commops_spec.constants import PLANS
from service import auth
from service.errors import envelope, error_response, internal_error
from service.settings import ServiceSettings
from service.store.db import ConnectionPool

log = logging.getLogger("service")

PUBLIC_PATHS = frozenset({"/v1/openapi.json", "/v1/docs", "/v1/docs/oauth2-redirect"})
ANONYMOUS_PLAN = "starter"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset: int  # epoch seconds at which the minute window resets
    retry_after: int  # seconds; meaningful when not allowed

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [
            (b"x-ratelimit-limit", str(self.limit).encode()),
            (b"x-ratelimit-remaining", str(self.remaining).encode()),
            (b"x-ratelimit-reset", str(self.reset).encode()),
        ]


class RateLimiter:
    def __init__(self, minute_seconds: float, day_seconds: float, enforce: bool = True, clock=time.time):
        self.minute_seconds = minute_seconds
        self.day_seconds = day_seconds
        self.enforce = enforce
        self.clock = clock
        self._minute: dict[str, list[int]] = {}  # bucket -> [window index, count]
        self._day: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def hit(self, bucket: str, plan: str) -> Decision:
        """Count one request of `bucket` unless it exceeds a limit of `plan`."""
        limits = PLANS[plan]
        per_minute, per_day = limits["per_minute"], limits["per_day"]
        now = self.clock()
        minute_index = int(now // self.minute_seconds)
        day_index = int(now // self.day_seconds)
        minute_end = (minute_index + 1) * self.minute_seconds
        day_end = (day_index + 1) * self.day_seconds
        with self._lock:
            minute = self._window(self._minute, bucket, minute_index)
            day = self._window(self._day, bucket, day_index)
            over_minute = minute[1] >= per_minute
            over_day = per_day is not None and day[1] >= per_day
            allowed = not self.enforce or not (over_minute or over_day)
            if allowed:
                minute[1] += 1
                day[1] += 1
            remaining = per_minute - minute[1]
            if per_day is not None:
                remaining = min(remaining, per_day - day[1])
            if not self.enforce:
                remaining = per_minute  # limits are off: never make a client wait for a window
        retry_at = day_end if (over_day and not over_minute) else minute_end
        return Decision(
            allowed=allowed,
            limit=per_minute,
            remaining=max(0, remaining),
            reset=math.ceil(minute_end),
            retry_after=max(1, math.ceil(retry_at - now)),
        )

    @staticmethod
    def _window(store: dict[str, list[int]], bucket: str, index: int) -> list[int]:
        window = store.get(bucket)
        if window is None or window[0] != index:
            window = store[bucket] = [index, 0]
        return window


class RequestGate:
    """ASGI middleware: identify the caller, apply the rate limit, add the headers to
    whatever response follows, and turn any escaped exception into a bare 500 envelope."""

    def __init__(self, app, settings: ServiceSettings, pool: ConnectionPool):
        self.app = app
        self.limiter = RateLimiter(
            settings.rate_window_seconds, settings.day_window_seconds, enforce=settings.rate_limits_enabled
        )
        self.pool = pool

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["commops.raw_send"] = send  # the server's own send, for faults that cut connections
        path = scope["path"]
        headers = dict(scope.get("headers") or [])
        token = auth.bearer_token(headers.get(b"authorization", b"").decode("latin-1"))
        caller = auth.lookup(self.pool.get(), token) if token else None
        if caller is not None and not caller.revoked:
            decision = self.limiter.hit(caller.org_id, caller.plan)
        else:
            client = scope.get("client") or ("unknown", 0)
            decision = self.limiter.hit(f"unauthenticated:{client[0]}", ANONYMOUS_PLAN)
        rate_headers = decision.headers()

        protected = (path == "/v1" or path.startswith("/v1/")) and path not in PUBLIC_PATHS
        if protected and (caller is None or caller.revoked) and decision.allowed:
            if caller is not None:
                reason = "This API key has been revoked"
            elif token:
                reason = "Unknown API key"
            else:
                reason = "Missing API key: send Authorization: Bearer <key>"
            await _send_with(error_response(auth.unauthorized(reason)), rate_headers, scope, receive, send)
            return
        if not decision.allowed:  # also failed authentication beyond its address's budget
            response = envelope(
                429, "rate_limited",
                f"Request rate limit of the plan exceeded; retry in {decision.retry_after} s",
                {"limit": decision.limit, "retry_after": decision.retry_after},
                {"Retry-After": str(decision.retry_after)},
            )
            await _send_with(response, rate_headers, scope, receive, send)
            return

        scope.setdefault("state", {})["principal"] = caller if caller and not caller.revoked else None
        started = False

        async def send_with_headers(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *rate_headers]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:  # noqa: BLE001 - the last line of defence: log, answer 500, reveal nothing
            if not started:
                log.error("unhandled error on %s %s", scope.get("method"), path, exc_info=exc)
                await _send_with(internal_error(), rate_headers, scope, receive, send)
            # when the response had started, the exception handler already answered and logged


async def _send_with(response, extra_headers, scope, receive, send):
    async def add_headers(message):
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", []), *extra_headers]
        await send(message)

    await response(scope, receive, add_headers)
