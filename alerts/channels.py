"""The channels an alert goes out on: any set of them, each configured by its own COMMOPS_ALERT_* variables.

`send(alert)` delivers once or raises `DeliveryFailed` (one line: the channel and the cause, never its
URL's secret path or a password); the alerter retries and records. Every request has a deadline."""

from __future__ import annotations

import json
import smtplib
import ssl
import time
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from alerts.messages import Alert
from alerts.settings import AlertSettings
from service.webhooks.signing import delivery_headers

TIMEOUT_SECONDS = 10.0
USER_AGENT = "commops-alerts/1"


class DeliveryFailed(RuntimeError):
    """The channel did not take the alert; the message names the channel and why, in one line."""


class Channel(Protocol):
    name: str  # slack, webhook, email: the outbox owes each its messages

    def send(self, alert: Alert, message_id: str) -> None: ...


def _post(name: str, url: str, body: bytes, headers: dict[str, str]) -> None:
    where = urlsplit(url).netloc  # the host only: a Slack URL's path is its secret
    try:
        response = httpx.post(url, content=body, headers={"User-Agent": USER_AGENT, **headers},
                              timeout=httpx.Timeout(TIMEOUT_SECONDS), follow_redirects=False, trust_env=False)
    except httpx.HTTPError as error:
        raise DeliveryFailed(f"{name} ({where}): {type(error).__name__}: {error or 'no detail'}") from None
    if not 200 <= response.status_code < 300:
        raise DeliveryFailed(f"{name} ({where}): answered {response.status_code}")


@dataclass(frozen=True)
class SlackChannel:
    """A Slack incoming webhook: a plain POST of {"text": ...} (no bot token)."""

    url: str
    name: str = "slack"

    def send(self, alert: Alert, message_id: str) -> None:
        body = json.dumps({"text": alert.line()}).encode()
        _post(self.name, self.url, body, {"Content-Type": "application/json"})


@dataclass(frozen=True)
class WebhookChannel:
    """A JSON webhook signed as the service signs ours: `x-service-signature` (hex HMAC-SHA256 of the body)
    and the Standard Webhooks headers (`webhook-id` is the message's: the same on every retry)."""

    url: str
    secret: str
    name: str = "webhook"

    def send(self, alert: Alert, message_id: str) -> None:
        body = alert.to_json().encode()
        headers = delivery_headers(self.secret, message_id, int(time.time()), body)
        headers.pop("User-Agent", None)
        _post(self.name, self.url, body, headers)


@dataclass(frozen=True)
class EmailChannel:
    host: str
    port: int
    sender: str
    recipients: tuple[str, ...]
    user: str | None = None
    password: str | None = None
    starttls: bool = True
    name: str = "email"

    def send(self, alert: Alert, message_id: str) -> None:
        message = EmailMessage()
        message["Subject"] = alert.line()[:250]
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message["Message-ID"] = f"<{message_id}@commops-alerts>"
        details = [alert.line(), "", f"organization: {alert.org}", f"what: {alert.subject}", f"cause: {alert.cause}",
                   f"when: {alert.at}"]
        details += [f"run: {alert.run_url or alert.run_id}"] if alert.run_id else []
        message.set_content("\n".join(details) + "\n")
        try:
            with smtplib.SMTP(self.host, self.port, timeout=TIMEOUT_SECONDS) as smtp:
                if self.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if self.user:
                    smtp.login(self.user, self.password or "")
                smtp.send_message(message)
        except (OSError, smtplib.SMTPException) as error:
            reason = str(error).replace(self.password or "\0", "<password>") if self.password else str(error)
            raise DeliveryFailed(f"email ({self.host}:{self.port}): {type(error).__name__}: {reason}") from None


def configured_channels(settings: AlertSettings) -> list[Channel]:
    """Every channel the settings set up, in a fixed order."""
    channels: list[Channel] = []
    if settings.slack_webhook_url:
        channels.append(SlackChannel(settings.slack_webhook_url.get_secret_value()))
    if settings.webhook_url and settings.webhook_secret:
        channels.append(WebhookChannel(settings.webhook_url, settings.webhook_secret.get_secret_value()))
    if settings.smtp_host and settings.smtp_from and settings.recipients():
        channels.append(EmailChannel(
            settings.smtp_host, settings.smtp_port, settings.smtp_from, tuple(settings.recipients()),
            user=settings.smtp_user,
            password=settings.smtp_password.get_secret_value() if settings.smtp_password else None,
            starttls=settings.smtp_starttls,
        ))
    return channels
