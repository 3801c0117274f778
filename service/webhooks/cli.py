"""`commops service deliver`: the webhook delivery worker on its own, in the foreground."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from service.settings import ServiceSettings
from service.store.db import init_db
from service.webhooks.config import WebhookConfig
from service.webhooks.delivery import DeliveryWorker


@click.command("deliver")
@click.option("--db", "db_path", type=click.Path(path_type=Path), default=None,
              help="Service database (default: COMMOPS_SERVICE_DB, else $COMMOPS_DATA_DIR/service/service.db).")
@click.option("--time-scale", type=float, default=None, help="Multiply the retry delays (e.g. 0.001 for demos).")
def deliver(db_path: Path | None, time_scale: float | None) -> None:
    """Deliver webhook events until interrupted (Ctrl-C); safe next to `commops service run`."""
    overrides: dict[str, object] = {}
    if db_path is not None:
        overrides["db"] = db_path
    if time_scale is not None:
        overrides["webhook_time_scale"] = time_scale
    settings = ServiceSettings(**overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    init_db(settings.db)
    config = WebhookConfig.from_settings(settings)
    click.echo(f"delivering webhooks from {config.db} (Ctrl-C stops)")
    DeliveryWorker(config).run(handle_signals=True)
