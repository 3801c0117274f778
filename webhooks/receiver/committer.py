"""Group commit: events from concurrent requests share one durable inbox commit (SQLite or Postgres).

Each request hands its event to `GroupCommitter.submit` and waits; one writer thread
takes everything queued (up to `max_batch`), writes it in one transaction, commits
(one fsync of the WAL) and only then wakes the requests, which answer 2xx. Under load
this turns N fsyncs into one; alone, an event waits for nothing but its own commit.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any

from privacy.suppression import PrivacyKeyMissing, WatchedSuppression, event_suppressed
from resources.inbox.envelope import Envelope
from resources.inbox import Inbox, InboxUnreachable

log = logging.getLogger("webhooks.receiver")

_STOP = object()


class InboxUnavailable(RuntimeError):
    """The commit failed (disk full, file locked for too long, ...): the sender should retry."""


class GroupCommitter:
    def __init__(self, inbox: Inbox, max_batch: int = 256, suppression: WatchedSuppression | None = None) -> None:
        self.inbox = inbox
        self.max_batch = max_batch
        self.suppression = suppression  # erased people: their events are acknowledged, never stored
        self.suppressed = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="inbox-writer", daemon=True)

    def start(self) -> GroupCommitter:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Commit what is queued, then stop the writer thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    async def submit(self, raw: bytes, envelope: Envelope) -> bool:
        """Returns once the event is committed: True if new, False for an id already stored."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._queue.put((raw, envelope, future, loop))
        return await future

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch = [self._queue.get()]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if _STOP in batch:
                stopping = True
                batch = [item for item in batch if item is not _STOP]
            batch = self._without_suppressed(batch)
            if not batch:
                continue
            try:
                added = self.inbox.add_many([(raw, envelope) for raw, envelope, _, _ in batch])
            except Exception as exc:  # noqa: BLE001 (every request of the batch gets the failure)
                log.error("inbox commit failed for %d events: %s", len(batch), exc)
                error = InboxUnavailable(str(exc))
                for _, _, future, loop in batch:
                    _wake(loop, future, None, error)
                continue
            for (_, _, future, loop), new in zip(batch, added, strict=True):
                _wake(loop, future, new, None)
        self.inbox.close()


    def _without_suppressed(self, batch: list[Any]) -> list[Any]:
        """The batch less the events of suppressed people, which are answered as stored (the sender stops)."""
        if self.suppression is None:
            return batch
        try:
            suppression = self.suppression.get()
        except Exception as exc:  # noqa: BLE001 (the list unreadable, or it gained entries and this process
            # lacks the key: fail closed, the sender retries)
            shown = exc if isinstance(exc, (PrivacyKeyMissing, InboxUnreachable)) else type(exc).__name__
            log.error("suppression list: %s", shown)
            for _, _, future, loop in batch:
                _wake(loop, future, None, InboxUnavailable(str(exc)))
            return []
        kept = []
        for item in batch:
            if event_suppressed(item[1].data, suppression):
                self.suppressed += 1
                _wake(item[3], item[2], True, None)
            else:
                kept.append(item)
        if len(kept) < len(batch):
            log.info("dropped %d event(s) of suppressed people (%d so far)", len(batch) - len(kept), self.suppressed)
        return kept


def _wake(loop: asyncio.AbstractEventLoop, future: asyncio.Future[bool], result: bool | None,
          error: Exception | None) -> None:
    try:
        loop.call_soon_threadsafe(_settle, future, result, error)
    except RuntimeError:  # the server's loop is closed: nobody waits any more
        pass


def _settle(future: asyncio.Future[bool], result: bool | None, error: Exception | None) -> None:
    if future.done():  # the request was cancelled (client gone): the event is stored all the same
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(bool(result))
