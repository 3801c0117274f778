"""Pipeline settings read from the environment, with one-line errors naming what is missing."""

from __future__ import annotations

import os
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

BASE_URL_ENV = "COMMOPS_BASE_URL"
API_KEY_ENV = "COMMOPS_API_KEY"
DATA_DIR_ENV = "COMMOPS_DATA_DIR"
TIMEZONE_ENV = "COMMOPS_TIMEZONE"
ENRICH_LIMIT_ENV = "COMMOPS_ENRICH_DETAILS_LIMIT"

DEFAULT_DATA_DIR = "./data"
DEFAULT_TIMEZONE = "UTC"
# KOL details fetched per run at most (one GET each); a first sync of a large org drains
# its backlog over several nights instead of spending the night on detail requests.
DEFAULT_ENRICH_DETAILS_LIMIT = 5_000


class MissingSettingError(RuntimeError):
    """A required setting is not set; the message names its environment variable."""


def require_env(name: str, value: str | None = None) -> str:
    value = value if value is not None else os.environ.get(name)
    if not value:
        raise MissingSettingError(f"{name} is not set: export {name}=... (see README)")
    return value


def data_dir(value: str | None = None) -> Path:
    return Path(value or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).resolve()


def timezone() -> str:
    name = os.environ.get(TIMEZONE_ENV) or DEFAULT_TIMEZONE
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise MissingSettingError(f"{TIMEZONE_ENV}={name!r} is not a known IANA timezone") from exc
    return name


def enrich_details_limit() -> int:
    raw = os.environ.get(ENRICH_LIMIT_ENV)
    if not raw:
        return DEFAULT_ENRICH_DETAILS_LIMIT
    try:
        return int(raw)
    except ValueError as exc:
        raise MissingSettingError(f"{ENRICH_LIMIT_ENV}={raw!r} is not an integer") from exc
