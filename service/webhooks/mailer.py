"""The failure email: one per failure episode, to the organization's owner, over SMTP."""

from __future__ import annotations

import smtplib
from email.message import EmailMessage
from typing import Any

from service.webhooks.config import WebhookConfig


def failure_message(config: WebhookConfig, notice: dict[str, Any]) -> EmailMessage:
    message = EmailMessage()
    message["From"] = config.smtp_sender
    message["To"] = notice["owner_email"]
    message["Subject"] = f"Webhook {notice['id']} was marked failed"
    message.set_content(
        f"Deliveries to the webhook {notice['id']} of {notice['org_name']} ({notice['org_id']}) failed "
        f"after all retries, and the webhook was marked failed at {notice['failed_at']}.\n\n"
        f"URL: {notice['url']}\n"
        f"Reason: {notice['failure_reason']}\n\n"
        "New events are kept and will be delivered once the webhook is active again.\n"
        f"Attempt log: GET /v1/webhooks/{notice['id']}/deliveries?status=failed\n"
        f"Reactivate: PATCH /v1/webhooks/{notice['id']} with {{\"enabled\": true}}\n"
        f"Redeliver failed events: POST /v1/webhooks/{notice['id']}/redeliver with {{\"since\": \"<timestamp>\"}}\n"
    )
    return message


def send_failure_email(config: WebhookConfig, notice: dict[str, Any]) -> None:
    """Raises OSError / smtplib.SMTPException when the SMTP server cannot take it (the caller retries)."""
    with smtplib.SMTP(config.smtp_host, config.smtp_port, timeout=config.smtp_timeout_seconds) as smtp:
        smtp.send_message(failure_message(config, notice))
