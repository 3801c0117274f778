"""The retry schedule of part 6, time-scaled and jittered.

Counting: the first attempt plus 5 retries (after 1 min, 5 min, 30 min, 2 h, 24 h). The
delivery fails, and its webhook is marked failed, when the 5th retry fails: six attempts.
"""

from __future__ import annotations

import random

from commops_spec.constants import WEBHOOK_RETRY_DELAYS_SECONDS


class RetrySchedule:
    def __init__(self, time_scale: float = 1.0, jitter: float = 0.1):
        self.time_scale = time_scale
        self.jitter = jitter
        self._rng = random.Random()

    def delay_after(self, failures: int) -> float:
        """Seconds to wait after the `failures`-th failed attempt (1-based) before the next one."""
        base = WEBHOOK_RETRY_DELAYS_SECONDS[failures - 1] * self.time_scale
        # Jitter only ever delays: a retry never comes earlier than the spec says.
        return base * (1 + self._rng.random() * self.jitter)
