"""`commops sync --timeout`: a deadline for a whole run. When it expires, the run is stopped as Ctrl-C
stops it (`DeadlineExpired`, a KeyboardInterrupt raised in the main thread), so the same clean-up runs."""

from __future__ import annotations

import logging
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}
AGAIN_SECONDS = 0.05  # after an interrupt Python could only report


class DeadlineExpired(KeyboardInterrupt):
    """The run's --timeout expired."""


class Duration(click.ParamType):
    """Seconds, or a number with a unit: 90, 90s, 45m, 2h."""

    name = "DURATION"

    def convert(self, value, param, ctx):  # type: ignore[override]
        if isinstance(value, (int, float)):
            return float(value)
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(value))
        if found is None or float(found[1]) <= 0:
            self.fail(f"{value!r} is not a duration (e.g. 90s, 45m, 2h)", param, ctx)
        return float(found[1]) * _UNITS[found[2]]


def describe(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


class _InterruptsToldOnce(logging.Filter):
    """Drops a library's log of the interrupt that stopped it (SQLAlchemy logs "Exception closing connection"
    with its traceback when the interrupt lands in a pool's close): the command says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt))


class Deadline:
    """Whether the deadline expired: Dagster turns the interrupt raised inside a step into the run's failure, so
    the run may end as failed rather than raise DeadlineExpired."""

    expired = False


@contextmanager
def run_deadline(seconds: float | None) -> Iterator[Deadline]:
    """Within the block, DeadlineExpired is raised in the main thread `seconds` from now (None: never).
    An interrupt (the deadline's or Ctrl-C) is the command's to report: libraries' logs of it are dropped."""
    told_once = _InterruptsToldOnce()
    handlers = [h for h in (logging.lastResort, *logging.getLogger().handlers) if h is not None]
    for handler in handlers:
        handler.addFilter(told_once)
    deadline = Deadline()
    try:
        with _alarm(seconds, deadline):
            yield deadline
    finally:
        for handler in handlers:
            handler.removeFilter(told_once)


@contextmanager
def _alarm(seconds: float | None, deadline: Deadline) -> Iterator[None]:
    if not seconds:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        deadline.expired = True
        raise DeadlineExpired()

    def swallowed(unraisable: sys.UnraisableHookArgs) -> None:
        # The interrupt landed where Python cannot raise (a weakref or GC callback, a __del__) and only reports
        # it: raise it again a moment later, in the run's own code.
        if isinstance(unraisable.exc_value, DeadlineExpired):
            signal.setitimer(signal.ITIMER_REAL, AGAIN_SECONDS)
        else:
            previous_hook(unraisable)

    previous, previous_hook = signal.signal(signal.SIGALRM, expire), sys.unraisablehook
    sys.unraisablehook = swallowed
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.unraisablehook = previous_hook
