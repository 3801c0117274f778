"""Receiver settings: one pydantic-settings model read from the environment (`COMMOPS_*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from http_serving.proxies import TrustedProxies
from resources.inbox import describe_location, inbox_location, inbox_path
from webhooks.signatures import Secret, parse_secrets

# Twice the service's 8 MiB request cap: any record the service accepted fits in an event
# envelope, and an unsigned sender still cannot make the receiver buffer more than this.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
SECRETS_FILE_NAME = "webhook-secrets.json"


class ReceiverSettings(BaseSettings):
    """COMMOPS_WEBHOOK_SECRETS (comma-separated, each `secret` or `org_...=secret`), COMMOPS_DATA_DIR
    (default ./data), COMMOPS_DATA_GROUP, COMMOPS_WEBHOOK_MAX_BODY_BYTES (default 16 MiB),
    COMMOPS_WEBHOOK_UNVERIFIED_BYTES (default twice the body cap), COMMOPS_INBOX_URL (Postgres; default: the
    data directory's SQLite file), COMMOPS_FORWARDED_ALLOW_IPS (the reverse proxies whose X-Forwarded-For is
    believed; default none)."""

    model_config = SettingsConfigDict(env_prefix="COMMOPS_", extra="ignore", env_ignore_empty=True)

    webhook_secrets: SecretStr = Field(SecretStr(""), description="signing secrets, comma-separated, each `secret` "
                                       "or `org_...=secret` (verifies that organization's events only)")
    data_dir: Path = Path("./data")
    data_group: str | None = Field(None, description="the group that may read the data directory's shared files")
    webhook_max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, gt=0)
    # Bytes of bodies read but not verified yet, all requests together; past it 503 with Retry-After.
    webhook_unverified_bytes: int | None = Field(None, gt=0, description="default: twice the body cap")
    inbox_url: SecretStr | None = Field(None, description="postgresql://... (its password is never shown)")
    forwarded_allow_ips: TrustedProxies = Field("", description="IPs or networks of the proxies in front, comma-separated")

    @field_validator("webhook_unverified_bytes")
    @classmethod
    def _holds_one_whole_body(cls, value: int | None, info: ValidationInfo) -> int | None:
        cap = info.data.get("webhook_max_body_bytes")
        if value is not None and cap is not None and value < cap:
            raise ValueError(f"must be at least the body cap ({cap} bytes), or no body of that size could be received")
        return value

    @property
    def secrets(self) -> list[Secret]:
        """The secrets of COMMOPS_WEBHOOK_SECRETS (blank items dropped), each with its organization if bound."""
        return parse_secrets(self.webhook_secrets.get_secret_value())

    @property
    def unverified_bytes(self) -> int:
        """The cap on bytes of bodies not verified yet (COMMOPS_WEBHOOK_UNVERIFIED_BYTES, default twice the body cap)."""
        return self.webhook_unverified_bytes or 2 * self.webhook_max_body_bytes

    @property
    def inbox_path(self) -> Path:
        """The SQLite inbox of the data directory (used when COMMOPS_INBOX_URL is unset)."""
        return inbox_path(self.data_dir)

    @property
    def inbox_location(self) -> str | Path:
        """Where this receiver stores events: COMMOPS_INBOX_URL, else the data directory's file."""
        url = self.inbox_url.get_secret_value() if self.inbox_url else None
        return inbox_location(self.data_dir, url) if url else self.inbox_path

    @property
    def inbox_where(self) -> str:
        """The inbox as logs name it (a Postgres URL without its user and password)."""
        return describe_location(self.inbox_location)

    @property
    def secrets_file(self) -> Path:
        """Written by `commops webhooks register` (mode 0600), keyed by webhook id."""
        return self.data_dir.resolve() / SECRETS_FILE_NAME


def load_receiver_settings(data_dir: str | Path | None = None, max_body_bytes: int | None = None) -> ReceiverSettings:
    """The environment's settings, explicit values (command-line options) taking precedence; an invalid
    value raises ValueError with one line naming its variable."""
    overrides: dict = {}
    if data_dir:
        overrides["data_dir"] = Path(data_dir)
    if max_body_bytes is not None:
        overrides["webhook_max_body_bytes"] = max_body_bytes
    try:
        return ReceiverSettings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"COMMOPS_{'_'.join(map(str, first['loc'])).upper()}: {message}") from None
