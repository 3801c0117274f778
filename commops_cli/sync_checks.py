"""What a sync checks before anything runs, apart from the run so that a command failing here never imports
Dagster: the organization and its key variable, the snapshot date, the suppression list, the data directory.
A missing or invalid setting is a `SettingsError` naming its variable; anything else a `SyncError`, one line."""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass
from datetime import datetime

from assets import snapshot_date as dates
from commops_cli.command_checks import prepare_data_dir
from privacy.suppression import PrivacyKeyMissing, Suppression
from resources.inbox import InboxUnreachable
from resources.orgs import DEFAULT_ORG, OrgRegistry, default_org
from resources.settings import API_KEY_ENV, BASE_URL_ENV, TIMEZONE_ENV, Settings, load_settings, not_set

class SyncError(RuntimeError):
    """The sync failed; the message is one line saying why."""


class BlockingChecksFailed(SyncError):
    """A blocking data-quality check failed: its table was not loaded, the run failed."""


@dataclass(frozen=True)
class CheckedSync:
    settings: Settings
    registry: OrgRegistry


def check_sync(snapshot_date: str | None = None, base_url: str | None = None,
               data_dir: str | os.PathLike[str] | None = None, api_key_env: str = API_KEY_ENV,
               org: str = DEFAULT_ORG) -> CheckedSync:
    """The settings of a sync of `org` (as `run_sync` takes them), checked; the data directory prepared."""
    settings = load_settings(base_url=base_url, data_dir=data_dir)
    registry = OrgRegistry(settings.data_dir, default=functools.partial(default_org, settings.base_url, api_key_env))
    chosen = registry.find(org)
    if chosen is None:
        raise not_set(BASE_URL_ENV) if org == DEFAULT_ORG else registry.unknown(org)
    chosen.api_key()  # SettingsError naming its variable, before anything runs
    check_snapshot_date(snapshot_date)
    try:
        Suppression.load(settings.data_dir)  # fails closed: a suppression list without its key, or unreadable
    except (PrivacyKeyMissing, InboxUnreachable) as error:
        raise SyncError(str(error)) from None
    try:
        prepare_data_dir(settings)
    except OSError as error:
        raise SyncError(f"cannot write to the data directory {settings.data_dir}: {error.strerror or error}") from None
    return CheckedSync(settings, registry)


CHECKED_OPTIONS = tuple(inspect.signature(check_sync).parameters)  # the sync's options `check_sync` takes


def check_snapshot_date(requested: str | None) -> None:
    """A snapshot is dated the day it is read: only today's date (COMMOPS_TIMEZONE) may be asked for."""
    if requested is None:
        return
    today = dates.today()
    if requested == today:
        return
    try:
        datetime.strptime(requested, "%Y-%m-%d")
    except ValueError:
        raise SyncError(f"--date {requested}: not a date (YYYY-MM-DD)") from None
    raise SyncError(
        f"--date {requested}: the API serves only its current data, so a snapshot can only be dated today "
        f"({today}, {TIMEZONE_ENV}={load_settings().timezone}); earlier days are in the lake's "
        "snapshot_date=... folders and the *_history views"
    )
