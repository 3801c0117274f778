"""A listing read ahead on a thread of its own: its first pages are requested and decoded while the caller is
still busy elsewhere (a run between two steps). The reader takes the iterator back when it comes: the
thread stops, what it read is handed over in order, and the rest is read on the reader's own thread, as
if nothing had been read ahead (so memory and threads are what they were without it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class ReadAhead(Generic[T]):
    """Runs `items` on its own thread, at most `depth` items ahead. Iterate it once: the items in order
    (then the iterator's own error, if it raised one); `close()` stops it, read or not."""

    def __init__(self, items: Iterator[T], *, depth: int, name: str) -> None:
        self._items = items
        self._depth = max(depth, 1)
        self._read: list[object] = []  # produced and not yet handed over, in order
        self._stopping = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[T]:
        self._stop()
        for item in self._read:
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item  # type: ignore[misc]
        self._read = []
        yield from self._items

    def close(self) -> None:
        """Stop reading ahead (what was read is dropped) and close the iterator."""
        self._stop()
        self._read = []
        close = getattr(self._items, "close", None)
        if close is not None:
            close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def ahead(self) -> int:
        """Items produced and not handed over yet."""
        with self._changed:
            return len(self._read)

    def _stop(self) -> None:
        """Stop the thread after the item it is producing (a page being fetched ends with its request)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join()

    def _run(self) -> None:
        try:
            for item in self._items:
                if not self._keep(item):
                    return
            self._keep(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the reader, who raises it
            self._keep(_Raised(error))

    def _keep(self, item: object) -> bool:
        """Keep `item` for the reader (always); False when the thread is to stop."""
        with self._changed:
            while len(self._read) >= self._depth and not self._stopping:
                self._changed.wait()
            self._read.append(item)
            return not self._stopping
