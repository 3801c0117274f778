"""Serving the receiver: in the foreground (`commops receiver run`) or in a background thread
(tests, benchmarks); uvicorn itself is run by http_serving."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette

from http_serving.proxies import proxy_options
from http_serving.server import ThreadedServer
from webhooks.receiver.app import HEALTH_PATH, WEBHOOK_PATH, create_app
from privacy.suppression import PrivacyKeyMissing, WatchedSuppression
from webhooks.receiver.committer import GroupCommitter
from resources.inbox import Inbox, InboxUnreachable
from webhooks.receiver.settings import ReceiverSettings


class ReceiverStartError(RuntimeError):
    """The receiver cannot start; the message is one line saying why and what to do."""


def open_app(settings: ReceiverSettings) -> Starlette:
    """The app over the inbox of `settings`, or ReceiverStartError when the inbox cannot be opened
    (the data dir is not writable, the Postgres of COMMOPS_INBOX_URL is unreachable)."""
    try:
        inbox = Inbox(settings.inbox_location)
    except InboxUnreachable as exc:
        raise ReceiverStartError(str(exc)) from None
    try:
        suppression = WatchedSuppression(settings.data_dir, settings.inbox_location)
    except (PrivacyKeyMissing, InboxUnreachable) as exc:
        raise ReceiverStartError(str(exc)) from None
    return create_app(settings, committer=GroupCommitter(inbox, suppression=suppression))


class ReceiverServer(ThreadedServer):
    """`with ReceiverServer(settings) as rx: httpx.post(rx.url, ...)`: uvicorn in a thread on
    127.0.0.1 and a free port; start() returns once /healthz answers, stop() waits for it."""

    name = "receiver"

    def __init__(self, settings: ReceiverSettings, host: str = "127.0.0.1", port: int = 0,
                 app: Starlette | None = None) -> None:
        super().__init__(host, port, **proxy_options(settings.forwarded_allow_ips))
        self.settings = settings
        self._app = app

    @property
    def base_url(self) -> str:
        return super().url

    @property
    def url(self) -> str:
        return self.base_url + WEBHOOK_PATH

    def make_app(self) -> Starlette:
        return self._app or open_app(self.settings)

    def ready(self) -> bool:
        return httpx.get(self.base_url + HEALTH_PATH, timeout=2).status_code == 200
