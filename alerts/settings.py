"""The alert channels and thresholds, from the environment (COMMOPS_ALERT_*, COMMOPS_DAGSTER_URL).

Secrets (the Slack webhook URL holds one, the webhook secret, the SMTP password) are `SecretStr`:
never printed, never stored, never part of a message."""

from __future__ import annotations

import os

from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from resources.settings import SettingsError

DAGSTER_URL_ENV = "COMMOPS_DAGSTER_URL"


class AlertSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COMMOPS_ALERT_", extra="ignore", env_ignore_empty=True)

    slack_webhook_url: SecretStr | None = Field(default=None, description="A Slack incoming-webhook URL.")
    webhook_url: str | None = Field(default=None, description="A URL that receives each alert as signed JSON.")
    webhook_secret: SecretStr | None = Field(default=None, description="The HMAC key that signs the webhook's alerts.")
    smtp_host: str | None = Field(default=None, description="The SMTP server that sends alert emails.")
    smtp_port: int = Field(default=587, description="Its port.")
    smtp_user: str | None = Field(default=None, description="Its login, if it needs one.")
    smtp_password: SecretStr | None = Field(default=None, description="Its password.")
    smtp_from: str | None = Field(default=None, description="The sender address.")
    smtp_to: str | None = Field(default=None, description="Recipients, comma-separated.")
    smtp_starttls: bool = Field(default=True, description="Upgrade the connection with STARTTLS before logging in.")
    backlog_minutes: float = Field(default=30, gt=0, description="An inbox event pending longer than this alerts.")
    receiver_silence_minutes: float = Field(
        default=60, gt=0, description="No new inbox event for this long while the API shows newer changes alerts.")
    dagster_url: str | None = Field(default=None, validation_alias=AliasChoices(DAGSTER_URL_ENV),
                                    description="The Dagster UI's address: alerts link to the run.")

    def recipients(self) -> list[str]:
        return [address.strip() for address in (self.smtp_to or "").split(",") if address.strip()]

    def run_url(self, run_id: str | None) -> str | None:
        if not run_id or not self.dagster_url:
            return None
        return f"{self.dagster_url.rstrip('/')}/runs/{run_id}"


def load_alert_settings() -> AlertSettings:
    """The environment's alert settings; SettingsError naming the variable when one is invalid or a
    channel is half set up (a webhook without its secret, SMTP without a sender or recipients)."""
    try:
        settings = AlertSettings()
    except ValidationError as error:
        problem = error.errors()[0]
        name = "COMMOPS_ALERT_" + str(problem["loc"][0]).upper()
        raise SettingsError(f"{name}={os.environ.get(name)!r}: {problem['msg']}") from None
    if settings.webhook_url and not settings.webhook_secret:
        raise SettingsError("COMMOPS_ALERT_WEBHOOK_URL is set without COMMOPS_ALERT_WEBHOOK_SECRET: "
                            "its alerts are signed with that secret")
    if settings.smtp_host and not (settings.smtp_from and settings.recipients()):
        raise SettingsError("COMMOPS_ALERT_SMTP_HOST is set: set COMMOPS_ALERT_SMTP_FROM and COMMOPS_ALERT_SMTP_TO too")
    return settings
