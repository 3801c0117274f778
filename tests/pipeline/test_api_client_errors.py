"""The API client's errors say what to do, are not retried when retrying cannot help, and never show the key."""

from __future__ import annotations

import logging
import time

import dagster as dg
import pytest

from resources.api import CommopsApiResource
from resources.commops_api import ApiClient, ApiUnavailableError, AuthenticationError, ScopeError
from resources.orgs import default_org

from .test_api_client_support import add_kols, client_for, collect


def test_a_rejected_key_says_so_and_is_not_retried(make_service):
    service = make_service()
    with ApiClient(service.base_url, "ck_wrong_key_123") as client:
        with pytest.raises(AuthenticationError) as raised:
            collect(client, "/kols")
        assert client.stats.requests == 1
    assert str(raised.value) == f"API key rejected (401) by {service.base_url}/kols: check COMMOPS_API_KEY"


def test_a_key_lacking_a_scope_names_the_scope_and_is_not_retried(make_service):
    service = make_service()
    kols_only_key = service.create_key(["kols:read"])
    with ApiClient(service.base_url, kols_only_key) as client:
        assert list(client.walk("/kols").pages()) == []
        with pytest.raises(ScopeError) as raised:
            collect(client, "/campaigns")
        assert client.stats.requests == 2
    assert raised.value.required_scope == "campaigns:read"
    assert str(raised.value) == f"403: this key lacks scope campaigns:read (GET {service.base_url}/campaigns)"


def test_a_service_that_never_answers_fails_at_once_naming_the_address(make_service):
    service = make_service()
    base_url = service.base_url
    service.server.stop()
    with ApiClient(base_url, service.api_key, max_retries=6, backoff_initial=0.5) as client:
        started = time.monotonic()
        with pytest.raises(ApiUnavailableError) as raised:
            collect(client, "/kols")
        assert client.stats.retries == 0
    assert time.monotonic() - started < 5  # not 36 s of backoff for a wrong address
    assert str(raised.value).startswith(f"cannot connect to {base_url} (")
    assert "COMMOPS_BASE_URL" in str(raised.value)


def test_a_service_that_went_away_after_answering_is_retried_then_fails_with_the_address(make_service):
    service = make_service()
    base_url = service.base_url
    with ApiClient(base_url, service.api_key, max_retries=2, backoff_initial=0.01) as client:
        assert list(client.walk("/kols").pages()) == []  # it answered once ...
        service.server.stop()
        with pytest.raises(ApiUnavailableError, match=f"GET {base_url}/kols failed after 3 attempts: ConnectError"):
            collect(client, "/kols")  # ... so a refused connection now is a passing fault, retried
        assert client.stats.retries == 2


def test_the_api_key_never_appears_in_logs_errors_or_reprs(make_service, caplog):
    service = make_service(fault_seed=1, fault_500_rate=0.2, fault_drop_rate=0.2, fault_truncate_rate=0.2)
    add_kols(service, 500, hours_ago=1)
    caplog.set_level(logging.DEBUG)  # httpx and httpcore included
    errors: list[Exception] = []
    with client_for(service, max_retries=10) as client:
        collect(client, "/kols")
        assert client.stats.retries > 0  # retries were logged
        for path in ("/campaigns", "/kols/kol_missing", "/nope?sort=x"):
            try:
                client.get(path)
            except Exception as error:  # noqa: BLE001 - collecting every kind on purpose
                errors.append(error)
        resource = CommopsApiResource()
        texts = [caplog.text, repr(client), repr(resource), str(resource), *map(str, errors), *map(repr, errors)]
    assert errors and caplog.text
    leaks = [text for text in texts if service.api_key in text]
    assert not leaks


def test_the_resource_serves_one_client_to_every_asset_of_a_run(make_service, monkeypatch):
    service = make_service()
    add_kols(service, 120, hours_ago=1)
    monkeypatch.setenv("COMMOPS_BASE_URL", service.base_url)
    monkeypatch.setenv("COMMOPS_API_KEY", service.api_key)
    seen = []
    org = default_org()

    @dg.asset
    def first(api: CommopsApiResource) -> int:
        seen.append(api.client_for(org))
        return sum(len(page.items) for page in api.client_for(org).walk("/kols").pages())

    @dg.asset(deps=[first])
    def second(api: CommopsApiResource) -> None:
        seen.append(api.client_for(org))
        assert api.client_for(org).stats.requests == 2  # the first asset's requests are on the same budget

    resource = CommopsApiResource()
    result = dg.materialize([first, second], resources={"api": resource}, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    assert result.output_for_node("first") == 120
    assert seen[0] is seen[1]
