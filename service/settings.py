"""Settings of the service, read from COMMOPS_SERVICE_* environment variables."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from http_serving.proxies import TrustedProxies

# Active (non-archived) KOLs an organization may hold; None means unlimited.
DEFAULT_KOL_LIMITS: dict[str, int | None] = {
    "starter": 1_000,
    "professional": 25_000,
    "enterprise": None,
}


def default_db_path() -> Path:
    """$COMMOPS_DATA_DIR/service/service.db (COMMOPS_DATA_DIR defaults to ./data): the database
    `commops demo` seeds, so every `commops service` command finds it without --db."""
    return Path(os.environ.get("COMMOPS_DATA_DIR") or "./data") / "service" / "service.db"


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COMMOPS_SERVICE_", extra="ignore", env_ignore_empty=True)

    # Peers whose X-Forwarded-For / X-Forwarded-Proto are believed: comma-separated IPs or networks of
    # the reverse proxies in front; empty: none, so a client is counted by the address it connects from.
    forwarded_allow_ips: TrustedProxies = ""

    # Storage
    db: Path = Field(default_factory=default_db_path)  # COMMOPS_SERVICE_DB overrides it

    # Plans and limits (requests per plan are in commops_spec.constants.PLANS)
    rate_limits_enabled: bool = True  # False: never 429 on request rate (headers are still sent)
    rate_window_seconds: float = 60  # the "minute" window; tests use 1
    day_window_seconds: float = 86_400
    kol_limits: dict[str, int | None] = Field(default_factory=lambda: dict(DEFAULT_KOL_LIMITS))
    # Request bodies above this are refused with 413 payload_too_large while being read.
    # 8 MiB holds the largest valid body (a campaign: 2 x 500,000-character email parts
    # plus 10,000 external contacts and 10,000 KOL ids).
    max_body_bytes: int = 8 * 1024 * 1024

    # Fault injection for client testing (service/faults.py); all rates 0 = off
    fault_seed: int = 0
    fault_500_rate: float = 0
    fault_503_rate: float = 0
    fault_429_rate: float = 0
    fault_slow_rate: float = 0
    fault_slow_seconds: float = 2.0
    fault_drop_rate: float = 0
    fault_truncate_rate: float = 0

    # Schema drift for client tests: every list/detail item gets an unknown top-level
    # field `x_added_field` and the KOL location an unknown nested key `x_geo`.
    extra_fields: bool = False

    # Activity simulator (service/simulator.py); 0 = off
    simulate_per_second: float = 0
    simulate_seed: int = 0  # seeds the simulator's choice of actions and rows

    # Production mode (stricter webhook URL rules in the webhook module)
    production: bool = False

    # --- webhooks (owned by service/webhooks/; see docs/spec-decisions.md#webhooks) ---
    webhook_worker_enabled: bool = True  # run the delivery worker inside `commops service run`
    webhook_time_scale: float = 1.0  # multiplies the retry delays 60/300/1800/7200/86400 s (tests: 0.001)
    webhook_jitter: float = 0.1  # a retry waits delay * uniform(1, 1 + jitter)
    webhook_attempt_timeout_seconds: float = 10.0  # overall deadline of one attempt, connect to last byte
    webhook_connect_timeout_seconds: float = 5.0
    webhook_max_response_bytes: int = 65_536  # at most this much of a receiver's answer is read
    # Receivers on loopback, private, link-local (cloud metadata) and other non-public
    # addresses: refused unless opted in (the demo and tests do); always refused in production.
    webhook_allow_private: bool = False
    webhook_per_webhook_concurrency: int = 8  # attempts in flight per webhook
    # retries falling due; a new event is seen within 5 ms of activity, within this interval after a quiet spell
    webhook_poll_interval_seconds: float = 0.05
    webhook_smtp_host: str = "localhost"
    webhook_smtp_port: int = 25
    webhook_smtp_sender: str = "commops-service@localhost"
    webhook_smtp_timeout_seconds: float = 10.0
    # --- end of webhooks ---

    @property
    def faults_enabled(self) -> bool:
        return any(
            rate > 0
            for rate in (
                self.fault_500_rate,
                self.fault_503_rate,
                self.fault_429_rate,
                self.fault_slow_rate,
                self.fault_drop_rate,
                self.fault_truncate_rate,
            )
        )
