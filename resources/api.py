"""The Commercial Operations API as a Dagster resource: one ApiClient (one rate budget) per run, for the
run's organization (its partition, an Org from the `orgs` resource): its address and its key variable."""

from __future__ import annotations

from typing import Any, Protocol

import dagster as dg
from pydantic import Field, PrivateAttr

from resources.arrow_memory import use_lean_memory_pool
from resources.commops_api import ApiClient
from resources.orgs import Org
from resources.settings import (
    CONNECT_TIMEOUT_SECONDS,
    READ_TIMEOUT_SECONDS,
    REQUEST_DEADLINE_SECONDS,
    UNRESPONSIVE_SECONDS,
    SettingsError,
)


class ReadAheadFetch(Protocol):
    """A list's fetch started before its step (assets/lake.py); closed at the run's end if never taken."""

    def close(self) -> None: ...


class CommopsApiResource(dg.ConfigurableResource):
    """Reads the Commercial Operations API; every asset of a run shares the run organization's client,
    its rate budget and its request cap. The organization's key is read from its variable when the client
    is built (Dagster stores the variable's name, never the key)."""

    per_page: int = Field(default=100, description="Page size of list requests (the API's maximum is 100).")
    max_concurrency: int = Field(default=4, description="Requests in flight at once (worker threads and connections).")
    max_requests_per_run: int = Field(default=100_000, description="Cap on HTTP requests per run, retries included.")
    timeout_seconds: float = Field(default=READ_TIMEOUT_SECONDS, description="Seconds one read of a response may wait for data.")
    connect_timeout_seconds: float = Field(default=CONNECT_TIMEOUT_SECONDS, description="Seconds to connect.")
    request_deadline_seconds: float = Field(default=REQUEST_DEADLINE_SECONDS,
                                            description="Seconds one request may take, from sending to its last byte.")
    unresponsive_seconds: float = Field(default=UNRESPONSIVE_SECONDS,
                                        description="Seconds the API may answer no request before the run fails.")
    max_retries: int = Field(default=6, description="Retries of a request after 5xx, timeouts, dropped connections, broken bodies.")

    _clients: dict[str, ApiClient] = PrivateAttr(default_factory=dict)
    _read_ahead: dict[tuple[str, str], ReadAheadFetch] = PrivateAttr(default_factory=dict)
    _log: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._log = context.log
        use_lean_memory_pool()  # pages are decoded into Arrow and written to Parquet in this process

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for fetch in self._read_ahead.values():  # started, and their step never ran: their requests ended above
            fetch.close()
        self._read_ahead.clear()

    def keep_read_ahead(self, org: str, name: str, fetch: ReadAheadFetch) -> None:
        """Hold a fetch of list `name` one step started ahead of that list's own step, which takes it."""
        self._read_ahead[(org, name)] = fetch

    def take_read_ahead(self, org: str, name: str) -> ReadAheadFetch | None:
        return self._read_ahead.pop((org, name), None)

    def client_for(self, org: Org) -> ApiClient:
        """The run's client for `org`, built once per run; dg.Failure naming the variable when its key is not set."""
        if org.name not in self._clients:
            try:
                api_key = org.api_key()
            except SettingsError as error:
                raise dg.Failure(str(error)) from None
            self._clients[org.name] = self._build(org, api_key)
        return self._clients[org.name]

    def _build(self, org: Org, api_key: str) -> ApiClient:
        return ApiClient(
            org.base_url,
            api_key,
            api_key_env=org.api_key_env,
            per_page=self.per_page,
            max_concurrency=self.max_concurrency,
            max_requests=self.max_requests_per_run,
            timeout=self.timeout_seconds,
            connect_timeout=self.connect_timeout_seconds,
            request_deadline=self.request_deadline_seconds,
            unresponsive_seconds=self.unresponsive_seconds,
            max_retries=self.max_retries,
            log=self._log,
        )
