"""The Commercial Operations API as a Dagster resource: one ApiClient (one rate budget) per run."""

from __future__ import annotations

import dagster as dg
from pydantic import Field, PrivateAttr

from resources.commops_api import ApiClient
from resources.settings import API_KEY_ENV, SettingsError, checked_base_url, not_set


class CommopsApiResource(dg.ConfigurableResource):
    """Reads the Commercial Operations API. Configure with dg.EnvVar("COMMOPS_BASE_URL") and
    dg.EnvVar("COMMOPS_API_KEY") (or the variable `api_key_env` names); every asset of a run shares
    the client, its rate budget and its request cap. The base URL is checked as the run starts."""

    base_url: str = Field(description="Service address including /v1, e.g. http://127.0.0.1:8000/v1 (COMMOPS_BASE_URL).")
    api_key: str = Field(repr=False, description="API key (COMMOPS_API_KEY); never logged.")
    api_key_env: str = Field(default=API_KEY_ENV, description="The variable the API key is read from, named in errors.")
    per_page: int = Field(default=100, description="Page size of list requests (the API's maximum is 100).")
    max_concurrency: int = Field(default=4, description="Requests in flight at once (worker threads and connections).")
    max_requests_per_run: int = Field(default=100_000, description="Cap on HTTP requests per run, retries included.")
    timeout_seconds: float = Field(default=30.0, description="Timeout of each request (connect capped at 10 s).")
    max_retries: int = Field(default=6, description="Retries of a request after 5xx, timeouts, dropped connections, broken bodies.")

    _client: ApiClient | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._client = self._build(context.log)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> ApiClient:
        """The run's client (built lazily when the resource is used outside a Dagster run)."""
        if self._client is None:
            self._client = self._build(None)
        return self._client

    def _build(self, log: object) -> ApiClient:
        try:
            base_url = checked_base_url(self.base_url)
            if not self.api_key:
                raise not_set(self.api_key_env)
        except SettingsError as error:
            raise dg.Failure(str(error)) from None
        return ApiClient(
            base_url,
            self.api_key,
            api_key_env=self.api_key_env,
            per_page=self.per_page,
            max_concurrency=self.max_concurrency,
            max_requests=self.max_requests_per_run,
            timeout=self.timeout_seconds,
            max_retries=self.max_retries,
            log=log,
        )
