"""The pipeline's settings: one pydantic-settings model over the COMMOPS_* environment.

Nothing reads the environment at import time: `load_settings()` is called where a value is
needed (building resources, a run's snapshot date). The API key is deliberately not a field:
only its variable's name travels (an organization's `api_key_env`), and the key is read from it
as a client is built, so no settings object, run config or Dagster storage ever holds its value.
`base_url` is the default organization's address as the environment or the command line gives it;
the organization itself is built from it in one place (resources/orgs.py, `default_org`).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, TypeAdapter, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from resources.inbox import DEFAULT_MAX_ATTEMPTS

ENV_PREFIX = "COMMOPS_"
BASE_URL_ENV = "COMMOPS_BASE_URL"
API_KEY_ENV = "COMMOPS_API_KEY"
DATA_DIR_ENV = "COMMOPS_DATA_DIR"
TIMEZONE_ENV = "COMMOPS_TIMEZONE"
# Plain http:// to a host other than loopback sends the API key in clear: refused unless this is true.
ALLOW_INSECURE_HTTP_ENV = "COMMOPS_ALLOW_INSECURE_HTTP"
# The Iceberg tables (resources/iceberg.py): the catalog's URL, read only as a dg.EnvVar (it may hold a password).
ICEBERG_CATALOG_URL_ENV = "COMMOPS_ICEBERG_CATALOG_URL"
ICEBERG_WAREHOUSE_ENV = "COMMOPS_ICEBERG_WAREHOUSE"
# The deadlines of every API request (COMMOPS_API_*_SECONDS): connecting, each read, one request from
# sending to its last byte, and the API answering no request at all for so long (the sync then fails).
CONNECT_TIMEOUT_SECONDS = 10.0
READ_TIMEOUT_SECONDS = 30.0
REQUEST_DEADLINE_SECONDS = 60.0
UNRESPONSIVE_SECONDS = 120.0
UNRESPONSIVE_ENV = "COMMOPS_API_UNRESPONSIVE_SECONDS"


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
    # The marts follow webhook and CRM runs at most this often (pipelines/marts_sensor.py); the nightly builds them too.
    marts_refresh_minutes: int = Field(default=15, ge=1, description="Minutes between marts rebuilds after incremental runs.")
    # Shared storage (docs/deploy.md). Credentials are never settings: the AWS SDK reads AWS_* itself, and
    # the Iceberg catalog's URL (it may hold a password) reaches its resource only as a dg.EnvVar.
    lake_url: str | None = Field(default=None, description="s3://bucket/prefix: the lake on object storage.")
    iceberg_warehouse: str | None = Field(default=None, description="s3://bucket/prefix of the Iceberg tables' files.")
    iceberg_namespace: str = Field(default="commops", description="Iceberg namespace of the published tables.")
    # The volume check (assets/checks.py): a snapshot's rows against the median of the table's last loads.
    volume_nights: int = Field(default=7, ge=1, description="Earlier landed loads the volume check compares against.")
    volume_max_drop: float = Field(default=0.2, ge=0, le=1, description="Largest drop (a fraction) that passes.")
    volume_max_rise: float | None = Field(default=None, gt=0, description="Largest rise (a fraction) that passes; unset: any.")
    api_connect_timeout_seconds: float = Field(default=CONNECT_TIMEOUT_SECONDS, gt=0,
                                               description="Seconds to connect to the API.")
    api_read_timeout_seconds: float = Field(default=READ_TIMEOUT_SECONDS, gt=0,
                                            description="Seconds one read of a response may wait for data.")
    api_request_deadline_seconds: float = Field(default=REQUEST_DEADLINE_SECONDS, gt=0,
                                                description="Seconds one request may take, sending to last byte.")
    api_unresponsive_seconds: float = Field(default=UNRESPONSIVE_SECONDS, gt=0,
                                            description="Seconds the API may answer no request before the sync fails.")

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


def checked_base_url(base_url: str | None, setting: str = BASE_URL_ENV, allow_insecure_http: bool | None = None,
                     opt_in: str = f"{ALLOW_INSECURE_HTTP_ENV}=true") -> str:
    """The service address, checked: set, http(s), without user or password, ending in the version
    segment /v1 (without a trailing /), and https unless the host is loopback or plain http is opted
    into (`allow_insecure_http`; None: COMMOPS_ALLOW_INSECURE_HTTP). SettingsError naming `setting`
    otherwise, never echoing a user or password. Every base URL is checked here: the default
    organization's as it is built (`default_org`: the commands before any work, a run as it starts,
    which is all a `dagster dev` run gets), the registry's as it is written and read."""
    if not base_url:
        raise not_set(setting)
    url = base_url.rstrip("/")
    not_http = SettingsError(f"{setting} is not an http(s) address (e.g. https://commops.example.com/v1)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except ValueError:
        raise not_http from None
    if "@" in parts.netloc:
        raise SettingsError(f"{setting} must not hold a user or password (user:password@host): "
                            "the service is authenticated by the API key's own variable")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise not_http  # not echoed: without a scheme, a user:password@ is not seen as one
    if not url.endswith("/v1"):
        raise SettingsError(f"{setting}={base_url} lacks the version segment: the address includes /v1 (e.g. {url}/v1)")
    if allow_insecure_http is None:
        allow_insecure_http = insecure_http_allowed()
    if parts.scheme == "http" and not allow_insecure_http and not is_loopback(parts.hostname):
        raise SettingsError(f"{setting}={url}: plain http:// would send the API key unencrypted to "
                            f"{parts.hostname}; use https://, or opt in with {opt_in}")
    return url


def is_loopback(host: str) -> bool:
    """localhost or a loopback address (127.0.0.0/8, ::1): traffic that never leaves the machine."""
    if host.rstrip(".").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def insecure_http_allowed() -> bool:
    """COMMOPS_ALLOW_INSECURE_HTTP as a boolean (unset: false); SettingsError naming it when it is not one."""
    value = os.environ.get(ALLOW_INSECURE_HTTP_ENV) or "false"
    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        raise SettingsError(f"{ALLOW_INSECURE_HTTP_ENV}={value!r} is not a boolean (true or false)") from None


def load_settings(**overrides: object) -> Settings:
    """The environment's settings, with explicit values (e.g. command-line options) taking precedence."""
    try:
        return Settings(**{name: value for name, value in overrides.items() if value is not None})
    except ValidationError as error:
        problem = error.errors()[0]
        name = ENV_PREFIX + str(problem["loc"][0]).upper()
        value = os.environ.get(name, problem.get("input"))
        raise SettingsError(f"{name}={value!r} {problem['msg'].removeprefix('Value error, ')}") from None
