"""Waiting on a condition with a deadline (never a bare sleep), shared by every test package."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01, what: str | None = None) -> Any:
    """Poll `condition` until it returns something truthy (returned); AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}" if what else f"condition not met within {timeout} s")
        time.sleep(interval)
