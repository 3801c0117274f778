"""Deliveries accepted and refused, logged as counts (never content): the first line at once, then at
most one line per interval, so the receiver's log says what it is doing without a line per request,
however many requests a sender makes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterable

log = logging.getLogger("webhooks.receiver")

_SOURCES_NAMED = 3  # client addresses named in a line


class CountLog:
    """Counts per reason, logged as one line at `level`: `<what>: N (n1 reason1, n2 reason2) from <clients>;
    T since start`. `reasons` are always listed, in that order (others as they come); `totals` are the
    counts since start, per reason."""

    def __init__(self, what: str, level: int, reasons: Iterable[str] = (), interval_seconds: float = 10.0) -> None:
        self.what = what
        self.level = level
        self.interval = interval_seconds
        self.totals: Counter[str] = Counter()
        self._listed = tuple(reasons)
        self._since: Counter[str] = Counter()  # since the last line
        self._sources: Counter[str] = Counter()
        self._last_line = float("-inf")
        self._line_due = False

    def count(self, reason: str, source: str | None = None) -> None:
        """Count one delivery; call on the event loop."""
        self.totals[reason] += 1
        self._since[reason] += 1
        if source:
            self._sources[source] += 1
        wait = self._last_line + self.interval - time.monotonic()
        if wait <= 0:
            self.flush()
        elif not self._line_due:
            self._line_due = True
            asyncio.get_running_loop().call_later(wait, self.flush)

    def flush(self) -> None:
        """Log what was counted since the last line, if anything."""
        self._line_due = False
        if not self._since:
            return
        reasons = [*self._listed, *(r for r in self._since if r not in self._listed)]
        parts = ", ".join(f"{self._since[r]} {r}" for r in reasons)
        sources = ""
        if self._sources:
            named = [source for source, _ in self._sources.most_common(_SOURCES_NAMED)]
            more = len(self._sources) - len(named)
            sources = " from " + ", ".join(named) + (f" and {more} more" if more else "")
        log.log(self.level, "%s: %d (%s)%s; %d since start", self.what, self._since.total(), parts, sources,
                self.totals.total())
        self._since.clear()
        self._sources.clear()
        self._last_line = time.monotonic()


def accepted_log() -> CountLog:
    """Deliveries answered 2xx: `stored` (new in the inbox) or `duplicates`."""
    return CountLog("deliveries accepted", logging.INFO, reasons=("stored", "duplicates"))


def refused_log() -> CountLog:
    """Deliveries refused, per the error code of the answer, with the clients that sent them."""
    return CountLog("deliveries refused", logging.WARNING)
