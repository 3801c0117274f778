"""The review page's settings (`COMMOPS_REVIEW_*`), and who may sign in.

- On loopback with neither COMMOPS_REVIEW_PASSWORD nor COMMOPS_REVIEW_USERS, the page serves one local admin
  (the operating-system user who started it), who opens the URL with the launch's token.
- COMMOPS_REVIEW_PASSWORD: the password of the user `admin`; COMMOPS_REVIEW_USERS: named users,
  `name=password` separated by commas. With either set, users sign in, and their decisions are audited
  under their name. Bound beyond loopback, one of them is required.
- COMMOPS_REVIEW_HOSTS: further names the browser may reach the page by (the Host header), comma-separated.
- COMMOPS_REVIEW_FORWARDED_ALLOW_IPS: the reverse proxies in front (IPs or networks, comma-separated), whose
  X-Forwarded-For names the client: the address sign-in failures are counted for. Unset, nobody's is believed.
"""

from __future__ import annotations

import getpass
import ipaddress
import re

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from http_serving.proxies import TrustedProxies

_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class ReviewSettingsError(ValueError):
    """A setting the page cannot start with; the message is one line naming the variable."""


class ReviewSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COMMOPS_REVIEW_", extra="ignore", env_ignore_empty=True)

    password: SecretStr | None = Field(None, description="password of the user `admin`")
    users: SecretStr | None = Field(None, description="`name=password,name=password`")
    hosts: str = Field("", description="further Host names the page answers to, comma-separated")
    session_hours: float = Field(12.0, gt=0, description="a signed-in session lasts this long")
    forwarded_allow_ips: TrustedProxies = Field("", description="IPs or networks of the proxies in front, comma-separated")

    def accounts(self) -> dict[str, str]:
        """{user name: password} of everyone who may sign in ({} : the loopback's one local admin)."""
        accounts: dict[str, str] = {}
        if self.password is not None:
            accounts["admin"] = self.password.get_secret_value()
        for item in (self.users.get_secret_value() if self.users else "").split(","):
            if not item.strip():
                continue
            name, sep, password = item.strip().partition("=")
            if not sep or not _USER.fullmatch(name) or not password:
                raise ReviewSettingsError("COMMOPS_REVIEW_USERS: each item is name=password (a name of letters, digits, "
                                          f". _ @ -), and {name[:20]!r} is not")
            accounts[name] = password
        return accounts

    def extra_hosts(self) -> set[str]:
        return {host.strip().lower().strip("[]") for host in self.hosts.split(",") if host.strip()}


def load_review_settings() -> ReviewSettings:
    try:
        return ReviewSettings()
    except ValidationError as error:
        problem = error.errors()[0]
        message = problem["msg"].removeprefix("Value error, ")
        raise ReviewSettingsError(f"COMMOPS_REVIEW_{str(problem['loc'][0]).upper()}: {message}") from None


def is_loopback(host: str) -> bool:
    """True for localhost and the loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def local_user() -> str:
    """The operating-system user, named in the audit when the page serves one local admin."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local-admin"
