"""One request budget shared by every request of a run: the plan's rate window and the run's request cap.

The server reports its window on every response (X-RateLimit-Limit / -Remaining / -Reset). The budget
keeps an estimate of how many more requests the current window allows, charging each request when it
is sent: the freshest Remaining (the lowest of the window) is lowered by the requests still in flight
(the server may not have counted them yet), so concurrent requests never overshoot the window. When the
estimate reaches zero, senders wait for the reset; a 429 pauses everyone for Retry-After (or the reset).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from ._errors import ApiError, RequestBudgetExceeded

# Reset values below this are read as seconds until the reset, above it as Unix epoch seconds.
_EPOCH_THRESHOLD = 1_000_000_000
# Wake this long after the announced reset, so the first request lands in the new window.
_RESET_MARGIN_SECONDS = 0.02
# Waits after a 429 when the server gives neither Retry-After nor a reset.
_DEFAULT_429_WAIT_SECONDS = 1.0


class RateBudget:
    """Thread-safe: `acquire()` before each request, then exactly one of `release()` / `rate_limited()`."""

    def __init__(
        self,
        max_requests: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_wait: Callable[[float], None] | None = None,
    ):
        self.max_requests = max_requests
        self._on_wait = on_wait  # told the seconds of each wait for a window's reset (called with the lock held)
        self._clock = clock
        self._wall_clock = wall_clock
        self._cond = threading.Condition()
        self.sent = 0
        self.rate_limited_count = 0
        self.throttled_seconds = 0.0
        self._in_flight = 0
        self._limit: int | None = None
        self._remaining: int | None = None  # None until the server has told us (one probe request at a time)
        self._unpaced = False  # the server sends no rate headers at all: nothing to pace by
        self._window_key: float | None = None  # identifies the server's current window (its reset value)
        self._window_tolerance = 0.0
        self._freshest_remaining: int | None = None  # the lowest Remaining the current window has reported
        self._reset_at: float | None = None  # clock() time of the current window's reset
        self._paused_until = 0.0  # after a 429
        self._stopped: str | None = None  # why no request may be sent any more
        self._throttled_until = 0.0

    # -- sending -------------------------------------------------------------------------------

    def acquire(self) -> None:
        """Block until the window allows one more request, then charge it; raise past the run's cap."""
        with self._cond:
            self._check_open()
            while not self._may_send():
                self._check_open()
            self._check_open()
            self.sent += 1
            self._in_flight += 1
            if self._remaining is not None:
                self._remaining -= 1

    def release(self, headers: Mapping[str, str] | None) -> None:
        """The request finished (any answer but 429, or no answer at all)."""
        with self._cond:
            self._in_flight -= 1
            if headers is not None:
                self._observe(headers)
            self._cond.notify_all()

    def stop(self, reason: str) -> None:
        """No more requests: every waiting and later acquire() raises ApiError(reason)."""
        with self._cond:
            self._stopped = reason
            self._cond.notify_all()

    def rate_limited(self, headers: Mapping[str, str], max_pause: float = float("inf")) -> float:
        """The request met a 429: pause every sender for Retry-After (or until the reset). Returns the pause;
        a pause longer than max_pause is not taken: the budget stops instead."""
        with self._cond:
            self._in_flight -= 1
            self.rate_limited_count += 1
            self._observe(headers)
            now = self._clock()
            wait = _retry_after_seconds(headers)
            if wait is None and self._reset_at is not None and self._reset_at > now:
                wait = self._reset_at - now + _RESET_MARGIN_SECONDS
            if wait is None:
                wait = _DEFAULT_429_WAIT_SECONDS
            if wait > max_pause:
                self._stopped = f"rate limited (429) for the next {wait:.0f} s, probably the plan's daily limit"
                self._cond.notify_all()
                return wait
            self._paused_until = max(self._paused_until, now + wait)
            # After the pause, probe one request at a time until a response states the window again.
            self._remaining = None
            self._cond.notify_all()
            return wait

    # -- internals (called with the lock held) ----------------------------------------------------

    def _check_open(self) -> None:
        if self._stopped is not None:
            raise ApiError(f"no more requests in this run: {self._stopped}")
        if self.sent >= self.max_requests:
            raise RequestBudgetExceeded(
                f"request budget exhausted: this run has sent {self.sent} requests, the cap set by "
                f"max_requests_per_run (ApiClient max_requests) is {self.max_requests}; raise it to sync more"
            )

    def _may_send(self) -> bool:
        """True when a request may go now; otherwise waits (releasing the lock) and returns False."""
        now = self._clock()
        if now < self._paused_until:
            self._throttle_until(self._paused_until, now)
            return False
        if self._remaining is None:
            # Limits unknown: send one probe at a time until a response tells us the window.
            if self._in_flight == 0 or self._unpaced:
                return True
            self._cond.wait()
            return False
        if self._remaining > 0:
            return True
        if self._reset_at is None:
            if self._in_flight == 0:  # nothing will tell us more: probe
                self._remaining = 1
                return True
            self._cond.wait()
            return False
        if now >= self._reset_at:
            self._start_next_window()
            return False
        if self._on_wait is not None and self._reset_at > self._throttled_until and self._reset_at - now >= 1.0:
            self._on_wait(self._reset_at - now)
        self._throttle_until(self._reset_at, now)
        return False

    def _start_next_window(self) -> None:
        # The reset has passed: assume a fresh window until its first response says otherwise.
        # Responses still carrying the old window's reset are stale from now on.
        self._remaining = (self._limit - self._in_flight) if self._limit is not None else None
        self._reset_at = None
        self._freshest_remaining = None
        if self._window_key is not None:
            self._window_key += max(self._window_tolerance, 0.5)

    def _throttle_until(self, until: float, now: float) -> None:
        if until > self._throttled_until:
            self.throttled_seconds += until - max(now, self._throttled_until)
            self._throttled_until = until
        self._cond.wait(timeout=max(until - now, 0.0))

    def _observe(self, headers: Mapping[str, str]) -> None:
        parsed = _rate_headers(headers)
        if parsed is None:
            self._unpaced = self._limit is None
            return
        limit, remaining, reset = parsed
        now = self._clock()
        if reset >= _EPOCH_THRESHOLD:
            key, tolerance = reset, 0.0
            reset_at = now + (reset - self._wall_clock()) + _RESET_MARGIN_SECONDS
        else:  # seconds until the reset: the key jitters with rounding, compare loosely
            key, tolerance = now + reset, 0.5
            reset_at = now + reset + _RESET_MARGIN_SECONDS
        self._limit = limit
        # The server may not have counted the requests still in flight yet: charge them too.
        estimate = remaining - self._in_flight
        if self._window_key is None or key > self._window_key + tolerance:  # a new window
            self._window_key, self._window_tolerance = key, tolerance
            self._remaining, self._reset_at, self._freshest_remaining = estimate, reset_at, remaining
        elif key >= self._window_key - tolerance:  # the same window
            if self._freshest_remaining is None or remaining <= self._freshest_remaining:
                # The server's latest count: whatever it counted after it is still in flight, so the
                # estimate is a safe lower bound, and may be higher than our own (which double-charges
                # requests the server had already counted while they were in flight).
                self._freshest_remaining, self._remaining = remaining, estimate
            # else: an answer overtaken by fresher ones
            if self._reset_at is None:
                self._reset_at = reset_at
        # else: a late answer from a window that has already ended


def _rate_headers(headers: Mapping[str, str]) -> tuple[int, int, float] | None:
    try:
        return (
            int(headers["x-ratelimit-limit"]),
            int(headers["x-ratelimit-remaining"]),
            float(headers["x-ratelimit-reset"]),
        )
    except (KeyError, ValueError):
        return None


def _retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None  # an HTTP date: fall back to the reset
