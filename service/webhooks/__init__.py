"""Webhook delivery (spec part 6): signing, address safety, the worker, failure emails.

`install` is the app plugin hook (service/app.py): it runs the delivery worker for the
lifetime of the service when `webhook_worker_enabled` is true.
"""

from __future__ import annotations

import asyncio
from typing import Any


def install(app: Any, settings: Any) -> None:
    if not getattr(settings, "webhook_worker_enabled", True):
        return
    from service.webhooks.config import WebhookConfig
    from service.webhooks.delivery import DeliveryWorker

    worker = DeliveryWorker(WebhookConfig.from_settings(settings))
    app.state.webhook_worker = worker

    async def start(_: Any) -> None:
        await asyncio.to_thread(worker.start)

    async def stop(_: Any) -> None:
        await asyncio.to_thread(worker.stop)

    app.state.on_startup.append(start)
    app.state.on_shutdown.append(stop)
