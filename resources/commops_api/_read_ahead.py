"""A listing read ahead on a thread of its own: its pages are requested and decoded while the caller is
still busy elsewhere (a run between two steps), and wait in a bounded queue until they are read."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class ReadAhead(Generic[T]):
    """Runs `items` on its own thread, at most `depth` items ahead of the reader. Iterate it once: the items
    in order, then the iterator's own error if it raised one. `close()` stops the thread, read or not."""

    def __init__(self, items: Iterator[T], *, depth: int, name: str) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max(depth, 1))
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(items,), name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item  # type: ignore[misc]

    def close(self) -> None:
        """Stop reading ahead (what was read is dropped) and wait for the thread. The thread ends after the
        item it is producing: a page being fetched ends with its request, or as the client's pool is shut."""
        self._stopped.set()
        self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the reader, who raises it
            self._put(_Raised(error))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def _put(self, item: object) -> bool:
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False
