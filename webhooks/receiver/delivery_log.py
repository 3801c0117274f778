"""Accepted deliveries, logged as counts (never content): the first at once, then at most one line
per interval, so the receiver's log says it is receiving without a line per event."""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("webhooks.receiver")


class DeliveryLog:
    def __init__(self, interval_seconds: float = 10.0) -> None:
        self.interval = interval_seconds
        self.total = 0
        self._stored = self._duplicates = 0  # since the last line
        self._last_line = float("-inf")
        self._line_due = False

    def accepted(self, stored: bool) -> None:
        """Count a delivery answered 2xx (`stored`: new in the inbox, else a duplicate); call on the event loop."""
        self.total += 1
        if stored:
            self._stored += 1
        else:
            self._duplicates += 1
        wait = self._last_line + self.interval - time.monotonic()
        if wait <= 0:
            self.flush()
        elif not self._line_due:
            self._line_due = True
            asyncio.get_running_loop().call_later(wait, self.flush)

    def flush(self) -> None:
        """Log what was accepted since the last line, if anything."""
        self._line_due = False
        if self._stored or self._duplicates:
            log.info("deliveries accepted: %d (%d stored, %d duplicates); %d since start",
                     self._stored + self._duplicates, self._stored, self._duplicates, self.total)
            self._stored = self._duplicates = 0
            self._last_line = time.monotonic()
