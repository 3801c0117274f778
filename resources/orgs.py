"""The organizations this deployment syncs: a registry of names, service addresses and the names of
the environment variables holding their API keys (never a key's value).

Each organization is a partition (`orgs`) of the same assets: one nightly run per organization, each
with its own API client and rate budget. The registry lives in the data directory (`orgs.json`), or
in Postgres when `COMMOPS_ORGS_URL=postgresql://...` (a deployment with processes on several hosts).

The single-organization setup is the organization `default`, an Org like any other, built in one place
(`default_org`): COMMOPS_BASE_URL (or the command line's --base-url) and COMMOPS_API_KEY (and
COMMOPS_ORGANIZATION_ID, which routes webhook events to it once a second organization exists). A
registered organization named `default` takes its place.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from resources.files import atomic_write_text
from resources.settings import (
    API_KEY_ENV,
    BASE_URL_ENV,
    SettingsError,
    checked_base_url,
    insecure_http_allowed,
    not_set,
)
from resources.postgres_urls import connection_error, redacted

DEFAULT_ORG = "default"
ORGANIZATION_ID_ENV = "COMMOPS_ORGANIZATION_ID"
ORGS_URL_ENV = "COMMOPS_ORGS_URL"
ORGS_FILE = "orgs.json"
# Matched whole (fullmatch): a name is a partition key and a lake folder, so not even a trailing newline.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ORGANIZATION_ID = re.compile(r"org_[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Org:
    """One organization: its name (the partition key), its service and where its key is read from."""

    name: str
    base_url: str
    api_key_env: str
    organization_id: str | None = None  # org_...: routes webhook events to it
    allow_insecure_http: bool = False  # plain http:// to a host other than loopback, opted into when added

    def api_key(self) -> str:
        """The key, read from its variable at the moment it is needed; SettingsError naming it when unset
        (for `default`, the single-organization setup's own line: export it)."""
        value = os.environ.get(self.api_key_env)
        if not value:
            if self.name == DEFAULT_ORG:
                raise not_set(self.api_key_env)
            raise SettingsError(f"organization {self.name}: {self.api_key_env} is not set (its API key is read from it)")
        return value


def check_org(name: str, base_url: str, api_key_env: str, organization_id: str | None,
              allow_insecure_http: bool = False) -> Org:
    """An Org whose every field is valid (a registry entry read from a file may hold any JSON value);
    SettingsError naming the field otherwise."""
    if not _matches(_NAME, name):
        raise SettingsError(f"organization name {name!r}: use 1-63 lower-case letters, digits, _ or -, starting "
                            "with a letter or digit (it names a partition and a lake folder)")
    if not _matches(_ENV_NAME, api_key_env):
        raise SettingsError(f"--api-key-env {api_key_env!r} is not an environment variable name")
    if organization_id is not None and not _matches(_ORGANIZATION_ID, organization_id):
        raise SettingsError(f"--organization-id {organization_id!r}: expected the service's org_... identifier")
    if not isinstance(allow_insecure_http, bool):
        raise SettingsError(f"organization {name}: allow_insecure_http is {allow_insecure_http!r}, not true or false")
    if not isinstance(base_url, str):
        raise SettingsError(f"organization {name}: its base URL is not text")
    url = checked_base_url(base_url, "--base-url", allow_insecure_http, opt_in="--allow-insecure-http")
    return Org(name, url, api_key_env, organization_id, allow_insecure_http)


def _matches(pattern: re.Pattern[str], value: object) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def _checked(orgs: list[Org], where: str) -> list[Org]:
    """The registry's entries, each checked as `orgs add` checks it: an entry edited by hand (a name
    with a newline, a base URL holding a password) is refused as it is read, before it names a path."""
    try:
        return [check_org(o.name, o.base_url, o.api_key_env, o.organization_id, o.allow_insecure_http) for o in orgs]
    except SettingsError as error:
        raise SettingsError(f"{where} holds an invalid organization ({error}): fix or remove it") from None


def default_org(base_url: str | None = None, api_key_env: str = API_KEY_ENV) -> Org | None:
    """The organization `default` of the single-organization setup, the one place it is built: at `base_url`
    (an explicit address, the command line's --base-url) else COMMOPS_BASE_URL, its key read from
    `api_key_env`, its webhook events those of COMMOPS_ORGANIZATION_ID. None when no address is set;
    SettingsError when the address is invalid (checked_base_url)."""
    address = base_url or os.environ.get(BASE_URL_ENV)
    if not address:
        return None
    allow_insecure_http = insecure_http_allowed()
    return Org(DEFAULT_ORG, checked_base_url(address, allow_insecure_http=allow_insecure_http), api_key_env,
               os.environ.get(ORGANIZATION_ID_ENV) or None, allow_insecure_http)


class _Store(Protocol):
    def read(self) -> list[Org]: ...
    def add(self, org: Org) -> None: ...
    def remove(self, name: str) -> Org | None: ...


class OrgRegistry:
    """The registered organizations, plus the organization `default` when it is configured and none registered
    takes its name. `default` builds it when it is needed: the environment's (`default_org`) unless told."""

    def __init__(self, data_dir: str | Path, url: str | None = None,
                 default: Callable[[], Org | None] = default_org) -> None:
        url = url if url is not None else os.environ.get(ORGS_URL_ENV) or None
        self.location = redacted(url) if url else str(Path(data_dir) / ORGS_FILE)  # shown: never a password
        self._store: _Store = _PostgresStore(url) if url else _FileStore(Path(data_dir) / ORGS_FILE)
        self._default = default

    def registered(self) -> list[Org]:
        """The registered organizations, each checked as it was when added (SettingsError otherwise)."""
        return _checked(self._store.read(), self.location)

    def all(self) -> list[Org]:
        """Every organization to sync: `default` when it is configured and not registered, then the registered ones."""
        orgs = self.registered()
        if all(o.name != DEFAULT_ORG for o in orgs) and (default := self._default()) is not None:
            orgs = [default, *orgs]
        return orgs

    def find(self, name: str) -> Org | None:
        """The organization `name`, or None when there is none (`default` is built only when asked for)."""
        registered = next((o for o in self.registered() if o.name == name), None)
        if registered is None and name == DEFAULT_ORG:
            return self._default()
        return registered

    def get(self, name: str) -> Org:
        found = self.find(name)
        if found is None:
            raise self.unknown(name)
        return found

    def unknown(self, name: str) -> SettingsError:
        """The error for an organization `name` there is none of, naming the known ones."""
        known = ", ".join(o.name for o in self.all()) or "none"
        hint = f" (set {BASE_URL_ENV} for the default organization)" if name == DEFAULT_ORG else ""
        return SettingsError(f"unknown organization {name!r}{hint}; known: {known} (commops orgs list)")

    def add(self, org: Org) -> None:
        """Register `org`; SettingsError when its name or organization id is taken."""
        self._store.add(org)

    def remove(self, name: str) -> Org:
        """Unregister `name`, even when its entry is invalid (the way out of a registry refused as read)."""
        removed = self._store.remove(name)
        if removed is None:
            raise SettingsError(f"organization {name!r} is not registered (commops orgs list)")
        return removed


def _taken(orgs: list[Org], org: Org) -> SettingsError | None:
    if any(o.name == org.name for o in orgs):
        return SettingsError(f"organization {org.name!r} is already registered (commops orgs remove {org.name} first)")
    if org.organization_id and any(o.organization_id == org.organization_id for o in orgs):
        taken = next(o.name for o in orgs if o.organization_id == org.organization_id)
        return SettingsError(f"--organization-id {org.organization_id} is already {taken}'s")
    return None


class _FileStore:
    """orgs.json in the data directory, replaced atomically; changes serialized by a lock file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Org]:
        if not self.path.exists():
            return []
        try:
            return [Org(**entry) for entry in json.loads(self.path.read_text())["orgs"]]
        except (ValueError, KeyError, TypeError) as error:
            raise SettingsError(f"{self.path} is not an organization registry ({error}): fix or remove it") from None

    def add(self, org: Org) -> None:
        with self._locked():
            orgs = self.read()
            if (error := _taken(orgs, org)) is not None:
                raise error
            self._write([*orgs, org])

    def remove(self, name: str) -> Org | None:
        with self._locked():
            orgs = self.read()
            found = next((o for o in orgs if o.name == name), None)
            if found is not None:
                self._write([o for o in orgs if o.name != name])
            return found

    def _write(self, orgs: list[Org]) -> None:
        atomic_write_text(self.path, json.dumps({"orgs": [asdict(o) for o in orgs]}, indent=2) + "\n")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{self.path.name}.lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield


class _PostgresStore:
    """A table `commops_orgs` in Postgres (created when missing, upgraded in place), for processes on
    several hosts."""

    _TABLE = (
        "CREATE TABLE IF NOT EXISTS commops_orgs (name TEXT PRIMARY KEY, base_url TEXT NOT NULL, "
        "api_key_env TEXT NOT NULL, organization_id TEXT UNIQUE, allow_insecure_http BOOLEAN NOT NULL DEFAULT FALSE)"
    )
    # Added after the first schema: a table made before it gains the column.
    _UPGRADE = "ALTER TABLE commops_orgs ADD COLUMN IF NOT EXISTS allow_insecure_http BOOLEAN NOT NULL DEFAULT FALSE"
    _COLUMNS = "name, base_url, api_key_env, organization_id, allow_insecure_http"

    def __init__(self, url: str) -> None:
        self.url = url

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        try:
            import psycopg2
        except ImportError:
            raise SettingsError(f"{ORGS_URL_ENV} is a Postgres URL: install the deploy extra (pip install -e '.[deploy]')") from None
        try:
            conn = psycopg2.connect(self.url)
        except psycopg2.Error as error:  # a malformed URL too (ProgrammingError), which libpq quotes
            raise SettingsError(connection_error(ORGS_URL_ENV, self.url, error)) from None
        try:
            with conn, conn.cursor() as cursor:
                unchecked = self.url not in _CURRENT_SCHEMAS
                if unchecked:  # once per process: ALTER TABLE locks the table even when it has the column
                    cursor.execute(self._TABLE)
                    cursor.execute(self._UPGRADE)
                yield cursor
            if unchecked:  # committed
                _CURRENT_SCHEMAS.add(self.url)
        finally:
            conn.close()

    def read(self) -> list[Org]:
        with self._transaction() as cursor:
            cursor.execute(f"SELECT {self._COLUMNS} FROM commops_orgs ORDER BY name")
            return [Org(*row) for row in cursor.fetchall()]

    def add(self, org: Org) -> None:
        with self._transaction() as cursor:
            cursor.execute("LOCK TABLE commops_orgs IN EXCLUSIVE MODE")
            cursor.execute(f"SELECT {self._COLUMNS} FROM commops_orgs")
            if (error := _taken([Org(*row) for row in cursor.fetchall()], org)) is not None:
                raise error
            cursor.execute(f"INSERT INTO commops_orgs ({self._COLUMNS}) VALUES (%s, %s, %s, %s, %s)",
                           (org.name, org.base_url, org.api_key_env, org.organization_id, org.allow_insecure_http))

    def remove(self, name: str) -> Org | None:
        with self._transaction() as cursor:
            cursor.execute(f"DELETE FROM commops_orgs WHERE name = %s RETURNING {self._COLUMNS}", (name,))
            row = cursor.fetchone()
            return None if row is None else Org(*row)


_CURRENT_SCHEMAS: set[str] = set()  # registries whose table this process made current
