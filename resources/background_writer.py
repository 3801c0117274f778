"""The warehouse's background writer: one thread that runs the merges handed to it, in the order given,
while the run's main thread goes on fetching the next list.

A merge is handed over under a key (table, organization, snapshot date) by the step that published its
snapshot; the step that materializes the table takes the merge's Future by the same key and waits for
its result, so an error raised in the thread is raised again in that step, with its own message. A
merge nobody handed over is the table step's own to run (a run of the table alone, a re-execution).

The thread runs at a lower CPU priority (Linux nice +10, the thread only): where the two compete for a
core, the fetch it runs beside comes first; with nothing else to run, a merge runs at full speed.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

NICENESS = 10  # added to the writer thread's nice value: background work, behind the fetch


class BackgroundWriter:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warehouse-writer", initializer=_yield_cpu)
        self._handed: dict[Hashable, Future[Any]] = {}
        self._guard = threading.Lock()

    def hand(self, key: Hashable, merge: Callable[[], Any]) -> None:
        """Queue `merge` behind the merges handed before it; its result is `take(key)`'s."""
        with self._guard:
            if key in self._handed:
                raise RuntimeError(f"a merge of {key} was already handed to the warehouse writer")
            self._handed[key] = self._pool.submit(merge)

    def handed(self, key: Hashable) -> bool:
        with self._guard:
            return key in self._handed

    def take(self, key: Hashable) -> Future[Any] | None:
        """The Future of the merge handed over under `key` (then forgotten), or None if none was."""
        with self._guard:
            return self._handed.pop(key, None)

    def close(self) -> None:
        """Drop the merges not started (their tables' steps never ran: the run stopped), finish the one
        running (it commits or rolls back whole)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._guard:
            self._handed.clear()


def _yield_cpu() -> None:
    """Lower this thread's CPU priority (on Linux a thread has its own nice value; elsewhere the call would
    reach the whole process, so it is skipped). Raising the nice value needs no privilege."""
    if sys.platform == "linux":
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + NICENESS)
