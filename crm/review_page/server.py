"""Starting the review page: the checks before it serves (sign-in beyond loopback), the names it answers to,
and `ReviewServer`, the page in a background thread (tests, the screenshot script)."""

from __future__ import annotations

import socket
from typing import Any

import httpx

from crm.review_page.access import Access
from crm.review_page.app import PageConfig, create_app
from crm.review_page.settings import LOOPBACK_NAMES, ReviewSettings, is_loopback, load_review_settings, local_user
from http_serving.server import ThreadedServer

WILDCARDS = ("0.0.0.0", "::", "")


class ReviewStartError(RuntimeError):
    """The page cannot start; the message is one line saying why and what to do."""


def allowed_hosts(host: str, settings: ReviewSettings) -> set[str]:
    """The names the browser may use in the Host header: the loopback names on loopback; beyond it the bound
    address, this machine's names and COMMOPS_REVIEW_HOSTS; any name when bound to every interface and
    COMMOPS_REVIEW_HOSTS is empty (users sign in there)."""
    names = set(LOOPBACK_NAMES) | {host.lower().strip("[]")} | settings.extra_hosts()
    if is_loopback(host):
        return names
    if host in WILDCARDS:
        return names if settings.extra_hosts() else {"*"}
    return names | {socket.gethostname().lower(), socket.getfqdn().lower()}


def check_sign_in(host: str, settings: ReviewSettings) -> dict[str, str]:
    """The accounts that may sign in; ReviewStartError when bound beyond loopback without any."""
    accounts = settings.accounts()
    if not is_loopback(host) and not accounts:
        raise ReviewStartError(f"bound to {host or 'every interface'}, beyond loopback, the page needs sign-in: set "
                               "COMMOPS_REVIEW_PASSWORD (or COMMOPS_REVIEW_USERS), or serve on 127.0.0.1")
    return accounts


def page_config(host: str, data_dir: Any, crm: Any = None, crm_problem: str | None = None,
                settings: ReviewSettings | None = None) -> PageConfig:
    """The page's configuration for serving on `host`; ReviewStartError when it may not start there."""
    settings = settings or load_review_settings()
    accounts = check_sign_in(host, settings)
    access = Access(accounts, local_user(), settings.session_hours * 3600)
    return PageConfig(data_dir=data_dir, access=access, hosts=allowed_hosts(host, settings), crm=crm,
                      crm_problem=crm_problem)


def configured_crm() -> tuple[Any, str | None]:
    """(the CRM resource of the environment, None), or (None, why not) where none is configured or a setting is
    wrong: the page then shows everything and refuses what writes to Salesforce."""
    from resources.crm import CrmError, configured_crm_resource
    from resources.settings import SettingsError

    try:
        return configured_crm_resource(), None
    except (CrmError, SettingsError) as error:
        return None, str(error)


def login_url(base_url: str, access: Access) -> str:
    """Where the admin starts: with the launch's token (one local admin), else the sign-in page."""
    return f"{base_url}/login" + ("" if access.signs_in else f"?token={access.token}")


class ReviewServer(ThreadedServer):
    """The page in a daemon thread on 127.0.0.1 (a free port unless given); start() returns once it answers."""

    name = "review page"

    def __init__(self, config: PageConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.config = config

    @property
    def login_url(self) -> str:
        return login_url(self.url, self.config.access)

    def make_app(self):
        return create_app(self.config)

    def ready(self) -> bool:
        return httpx.get(self.url + "/static/review.css", timeout=2).status_code == 200
