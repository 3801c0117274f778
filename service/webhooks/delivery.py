"""The delivery worker: sends due deliveries, records every attempt, schedules retries.

It runs an asyncio loop in its own thread (inside `commops service run`) or in the
foreground (`commops service deliver`). Each webhook is a lane with its own HTTP client
and at most `per_webhook_concurrency` attempts in flight, so a slow or dead receiver only
ever occupies its own lane. All SQL runs on one dedicated thread, off the event loop.
Deliveries are leased in the database while in flight, so two workers on one database do
not send the same delivery twice, and a crashed worker's leases expire.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx

from service.store import deliveries as store
from service.store import webhooks as webhook_store
from service.store.db import connect, to_iso
from service.webhooks.attempt import attempt, make_client
from service.webhooks.config import WebhookConfig
from service.webhooks.mailer import send_failure_email
from service.webhooks.retries import RetrySchedule

log = logging.getLogger("service.webhooks")
T = TypeVar("T")

_LEASE_MARGIN_SECONDS = 60.0
_EMAIL_RETRY_SECONDS = 30.0
_SHUTDOWN_GRACE_SECONDS = 5.0
# How often an idle worker asks SQLite whether anything committed: every 5 ms after activity, so a new event is
# sent within milliseconds, then twice as long after each quiet check, up to the poll interval. Checking every
# 5 ms for ever cost an idle service 8% of a core.
_COMMIT_CHECK_SECONDS = 0.005
# The longest an idle worker goes without looking for due work when no commit wakes it: owed failure emails are
# looked for once a second (_maybe_send_emails). Retries are not polled for: the worker sleeps until the next
# one falls due (store.next_due): a query for due work every poll interval cost an idle service 2% of a core at
# the default 50 ms, 8.5% at 10 ms.
_IDLE_MAX_SECONDS = 1.0
_CLAIM_DEPTH = 4  # claim up to this many deliveries per attempt slot, so lanes never wait on a poll


class DeliveryWorker:
    def __init__(self, config: WebhookConfig):
        self.config = config
        self.schedule = RetrySchedule(config.time_scale, config.jitter)
        self.owner = f"worker_{secrets.token_hex(6)}"
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Run in a background thread; returns once the worker is polling."""
        self._thread = threading.Thread(target=self.run, name="webhook-delivery", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("webhook delivery worker did not start within 10 s")

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._wake_for_stop)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _wake_for_stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def run(self, handle_signals: bool = False) -> None:
        """Deliver until stop(), or SIGINT/SIGTERM with handle_signals (main thread only); blocking."""
        asyncio.run(self._main(handle_signals))

    # ------------------------------------------------------------ the loop

    async def _main(self, handle_signals: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        if handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(signum, self._wake_for_stop)
        self._db_thread = ThreadPoolExecutor(1, thread_name_prefix="webhook-db")
        self._conn: sqlite3.Connection = await self._loop.run_in_executor(self._db_thread, connect, self.config.db)
        self._clients: dict[str, httpx.AsyncClient] = {}
        # Per webhook: claimed deliveries (in flight or queued) and the slots that bound attempts.
        self._in_flight: dict[str, set[asyncio.Task[None]]] = defaultdict(set)
        self._lanes: dict[str, asyncio.Semaphore] = {}
        self._to_record: list[tuple[store.AttemptRecord, asyncio.Future[str]]] = []
        self._recorder: asyncio.Task[None] | None = None
        self._email_task: asyncio.Task[None] | None = None
        self._next_email_check = 0.0
        # A second connection, used only on this loop, notices commits by any connection
        # (PRAGMA data_version), so new events are sent within milliseconds (_COMMIT_CHECK_SECONDS).
        self._watch = connect(self.config.db)
        self._check_every = _COMMIT_CHECK_SECONDS
        self._started.set()
        log.info("webhook delivery worker %s started on %s", self.owner, self.config.db)
        try:
            while not self._stopping.is_set():
                # Taken before looking: a wake or a commit while the worker looks is not lost.
                self._wake.clear()
                version = self._data_version()
                quiet = self.config.poll_interval_seconds
                try:
                    await self._dispatch_due()
                    self._maybe_send_emails()
                    quiet = await self._until_due()
                except Exception:  # e.g. locked for longer than busy_timeout: keep the worker alive, retry
                    log.exception("webhook dispatch failed; retrying in 1 s")
                    await asyncio.sleep(1.0)
                await self._idle(quiet, version)
        finally:
            await self._shutdown()

    async def _until_due(self) -> float:
        """How long to idle: until the next delivery falls due, at most _IDLE_MAX_SECONDS; the poll interval when
        one is due already but could not be claimed (its lane is full: a finished attempt wakes the worker)."""
        due = await self._db(store.next_due)
        if due is None:
            return _IDLE_MAX_SECONDS
        seconds = (datetime.fromisoformat(due) - datetime.now(UTC)).total_seconds()
        return self.config.poll_interval_seconds if seconds <= 0 else min(seconds, _IDLE_MAX_SECONDS)

    async def _idle(self, seconds: float, version: int) -> None:
        """Wait until a commit since `version` (PRAGMA data_version), a finished attempt, stop, or `seconds` (the next
        delivery falling due). Commits are looked for at most a poll interval apart."""
        deadline = time.monotonic() + seconds
        longest = max(self.config.poll_interval_seconds, _COMMIT_CHECK_SECONDS)
        while not (self._wake.is_set() or self._stopping.is_set()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._data_version() != version:
                self._check_every = _COMMIT_CHECK_SECONDS
                return
            try:
                await asyncio.wait_for(self._wake.wait(), min(remaining, self._check_every))
            except TimeoutError:
                self._check_every = min(self._check_every * 2, longest)
            else:
                self._check_every = _COMMIT_CHECK_SECONDS

    def _data_version(self) -> int:
        return self._watch.execute("PRAGMA data_version").fetchone()[0]

    async def _dispatch_due(self) -> None:
        now = datetime.now(UTC)
        # Claimed deliveries may queue behind a full lane: the lease covers that wait too.
        lease_seconds = _CLAIM_DEPTH * self.config.attempt_timeout_seconds + _LEASE_MARGIN_SECONDS
        lease_until = now + timedelta(seconds=lease_seconds)
        depth = _CLAIM_DEPTH * self.config.per_webhook_concurrency
        for webhook_id in await self._db(store.webhooks_with_due_work, to_iso(now)):
            free = depth - len(self._in_flight[webhook_id])
            if free <= 0:
                continue
            claimed = await self._db(
                store.claim_due, webhook_id, self.owner, to_iso(now), to_iso(lease_until), free
            )
            for delivery in claimed:
                task = asyncio.create_task(self._deliver(delivery))
                self._in_flight[webhook_id].add(task)
                task.add_done_callback(lambda done, wid=webhook_id: self._finished(wid, done))

    def _finished(self, webhook_id: str, task: asyncio.Task[None]) -> None:
        self._in_flight[webhook_id].discard(task)
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook delivery task crashed", exc_info=task.exception())

    async def _deliver(self, delivery: store.Claimed) -> None:
        lane = self._lanes.get(delivery.webhook_id)
        if lane is None:
            lane = self._lanes[delivery.webhook_id] = asyncio.Semaphore(self.config.per_webhook_concurrency)
        async with lane:
            if self._stopping.is_set():
                return  # not attempted; shutdown releases its lease
            client = self._client_for(delivery.webhook_id)
            outcome = await attempt(
                client, self.config, delivery.url, delivery.secret, delivery.event_id, delivery.body
            )
        record = store.AttemptRecord(delivery.id, delivery.webhook_id, outcome)
        status = await self._record(record)
        if status == "failed":
            log.warning("webhook %s marked failed: delivery %s exhausted its retries", delivery.webhook_id, delivery.id)
            self._next_email_check = 0.0

    async def _record(self, record: store.AttemptRecord) -> str:
        """Queue an attempt for the recorder, which writes whatever is queued in one transaction."""
        recorded: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._to_record.append((record, recorded))
        if self._recorder is None or self._recorder.done():
            self._recorder = asyncio.create_task(self._write_records())
        return await recorded

    async def _write_records(self) -> None:
        while self._to_record:
            batch, self._to_record = self._to_record, []
            try:
                records = [record for record, _ in batch]
                statuses = await self._db(store.record_attempts, records, self.schedule.delay_after, datetime.now(UTC))
            except Exception as exc:  # not recorded: the leases expire and the deliveries are attempted again
                for _, recorded in batch:
                    recorded.set_exception(exc)
                continue
            for (_, recorded), status in zip(batch, statuses):
                recorded.set_result(status)

    def _client_for(self, webhook_id: str) -> httpx.AsyncClient:
        client = self._clients.get(webhook_id)
        if client is None:
            client = self._clients[webhook_id] = make_client(self.config)
        return client

    # ------------------------------------------------------------ failure emails

    def _maybe_send_emails(self) -> None:
        if self._email_task is not None and not self._email_task.done():
            return
        if time.monotonic() < self._next_email_check:
            return
        self._next_email_check = time.monotonic() + 1.0
        self._email_task = asyncio.create_task(self._send_owed_emails())

    async def _send_owed_emails(self) -> None:
        try:
            await self._send_each_owed_email()
        except sqlite3.Error as exc:
            log.warning("failure emails not checked: %s", exc)

    async def _send_each_owed_email(self) -> None:
        for notice in await self._db(webhook_store.owed_notifications):
            if not notice["owner_email"]:
                log.warning("webhook %s failed but organization %s has no owner email", notice["id"], notice["org_id"])
                await self._db(webhook_store.mark_notified, notice["id"], notice["failed_at"])
                continue
            try:
                await asyncio.get_running_loop().run_in_executor(None, send_failure_email, self.config, notice)
            except Exception as exc:  # SMTP down: keep it owed and try again later
                log.warning(
                    "failure email for webhook %s not sent (%s:%s): %s",
                    notice["id"],
                    self.config.smtp_host,
                    self.config.smtp_port,
                    exc,
                )
                self._next_email_check = time.monotonic() + _EMAIL_RETRY_SECONDS
                return
            await self._db(webhook_store.mark_notified, notice["id"], notice["failed_at"])

    # ------------------------------------------------------------ plumbing

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._db_thread, fn, self._conn, *args)

    async def _shutdown(self) -> None:
        self._stopping.set()  # queued deliveries give up their turn
        self._watch.close()
        tasks = [task for lane in self._in_flight.values() for task in lane]
        for extra in (self._email_task, self._recorder):
            if extra is not None:
                tasks.append(extra)
        if tasks:  # let attempts under way finish and be recorded, within a short grace period
            await asyncio.wait(tasks, timeout=min(self.config.attempt_timeout_seconds, _SHUTDOWN_GRACE_SECONDS))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Attempts cut short are not recorded; releasing their leases makes them due again.
        await self._db(store.release_leases, self.owner)
        for client in self._clients.values():
            await client.aclose()
        await self._loop.run_in_executor(self._db_thread, self._conn.close)
        self._db_thread.shutdown()
        log.info("webhook delivery worker %s stopped", self.owner)
