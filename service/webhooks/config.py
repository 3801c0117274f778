"""Delivery settings, read once from ServiceSettings (its `webhook_*` fields)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class WebhookConfig:
    db: Path
    time_scale: float = 1.0  # multiplies the retry delays of part 6 (tests use e.g. 0.001)
    jitter: float = 0.1  # each retry waits delay * uniform(1, 1 + jitter): never earlier than the spec
    attempt_timeout_seconds: float = 10.0  # overall deadline of one attempt: resolve, connect, send, read
    connect_timeout_seconds: float = 5.0
    max_response_bytes: int = 65_536  # read at most this much of a receiver's answer
    allow_private: bool = False  # loopback/private/link-local receivers: opt-in; always refused in production
    per_webhook_concurrency: int = 8
    poll_interval_seconds: float = 0.05
    smtp_host: str = "localhost"
    smtp_port: int = 25
    smtp_sender: str = "commops-service@localhost"
    smtp_timeout_seconds: float = 10.0

    @classmethod
    def from_settings(cls, settings: Any) -> WebhookConfig:
        production = bool(getattr(settings, "production", False))
        fields: dict[str, Any] = {"db": Path(settings.db)}
        for name in cls.__dataclass_fields__:
            value = getattr(settings, f"webhook_{name}", None)
            if name != "db" and value is not None:
                fields[name] = value
        fields["allow_private"] = fields.get("allow_private", False) and not production
        return cls(**fields)
