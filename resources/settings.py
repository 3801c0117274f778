"""The pipeline's settings: one pydantic-settings model over the COMMOPS_* environment.

Nothing reads the environment at import time: `load_settings()` is called where a value is
needed (building resources, a run's snapshot date). The API key is deliberately not a field:
it reaches the API resource only as `dg.EnvVar(API_KEY_ENV)`, so no settings object, run
config or Dagster storage ever holds its value; `require_api_key` only checks it is set.
"""

from __future__ import annotations

import os
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from webhook_receiver.inbox import DEFAULT_MAX_ATTEMPTS

ENV_PREFIX = "COMMOPS_"
BASE_URL_ENV = "COMMOPS_BASE_URL"
API_KEY_ENV = "COMMOPS_API_KEY"
DATA_DIR_ENV = "COMMOPS_DATA_DIR"
TIMEZONE_ENV = "COMMOPS_TIMEZONE"
# The Iceberg tables (resources/iceberg.py): the catalog's URL, read only as a dg.EnvVar (it may hold a password).
ICEBERG_CATALOG_URL_ENV = "COMMOPS_ICEBERG_CATALOG_URL"
ICEBERG_WAREHOUSE_ENV = "COMMOPS_ICEBERG_WAREHOUSE"


class SettingsError(RuntimeError):
    """A setting is missing or invalid; the message names its environment variable and what to do."""


def not_set(name: str) -> SettingsError:
    return SettingsError(f"{name} is not set: export {name}=... (see README)")


class Settings(BaseSettings):
    # An empty variable counts as unset: `COMMOPS_DATA_DIR=` means ./data, not the current directory.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True)

    base_url: str | None = Field(default=None, description="Service address including /v1 (COMMOPS_BASE_URL).")
    data_dir: Path = Field(default=Path("./data"), description="Lake, warehouse, analytics copy, Dagster home.")
    # Owner-only without it (file_modes/data_dir.py); the group's name is checked where the directory is prepared.
    data_group: str | None = Field(default=None, description="Group that may read the lake, analytics.duckdb and reports.")
    timezone: str = Field(default="UTC", description="Timezone of snapshot dates and the 02:00 schedule.")
    # KOL details fetched per run at most (one GET each); a first sync of a large org drains
    # its backlog over several nights instead of spending the night on detail requests.
    enrich_details_limit: int = Field(default=5_000, ge=0, description="KOL details fetched per run at most.")
    events_max_attempts: int = Field(
        default=DEFAULT_MAX_ATTEMPTS, ge=1, description="Failed applications before a webhook event is quarantined."
    )
    # Shared storage (docs/deploy.md). Credentials are never settings: the AWS SDK reads AWS_* itself, and
    # the Iceberg catalog's URL (it may hold a password) reaches its resource only as a dg.EnvVar.
    lake_url: str | None = Field(default=None, description="s3://bucket/prefix: the lake on object storage.")
    iceberg_warehouse: str | None = Field(default=None, description="s3://bucket/prefix of the Iceberg tables' files.")
    iceberg_namespace: str = Field(default="commops", description="Iceberg namespace of the published tables.")

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("is not a known IANA timezone") from None
        return value

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def dagster_home(self) -> Path:
        """One Dagster instance for `commops sync`, `demo` and `ui`: what the CLI ran, the UI shows."""
        return self.data_dir / "dagster_home"

    def require_base_url(self) -> str:
        """The service address, checked (`checked_base_url`)."""
        return checked_base_url(self.base_url)


def checked_base_url(base_url: str | None) -> str:
    """The service address, checked: set, http(s), ending in the version segment /v1 (without a
    trailing /); SettingsError naming COMMOPS_BASE_URL otherwise. The commands check it before any
    work; the API resource checks it again as a run starts, which is all a `dagster dev` run gets."""
    if not base_url:
        raise not_set(BASE_URL_ENV)
    url = base_url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"{BASE_URL_ENV}={base_url!r} is not an http(s) address")
    if not url.endswith("/v1"):
        raise SettingsError(
            f"{BASE_URL_ENV}={base_url} lacks the version segment: the address includes /v1 (e.g. {url}/v1)"
        )
    return url


def load_settings(**overrides: object) -> Settings:
    """The environment's settings, with explicit values (e.g. command-line options) taking precedence."""
    try:
        return Settings(**{name: value for name, value in overrides.items() if value is not None})
    except ValidationError as error:
        problem = error.errors()[0]
        name = ENV_PREFIX + str(problem["loc"][0]).upper()
        value = os.environ.get(name, problem.get("input"))
        raise SettingsError(f"{name}={value!r} {problem['msg'].removeprefix('Value error, ')}") from None


def require_api_key(env_name: str = API_KEY_ENV) -> None:
    """Check the key is set (its value is only ever read by the API resource, as a dg.EnvVar)."""
    if not os.environ.get(env_name):
        raise not_set(env_name)
