"""Expired sessions and the org's API request budget, as a nightly run meets them."""

from __future__ import annotations

import pytest
import requests
from simple_salesforce import SalesforceLogin

from resources.crm import CrmError
from resources.crm.salesforce import NOT_RENEWABLE
from tests.crm.conftest import PASSWORD, TOKEN, USERNAME, raw_client, resource_for, start_standin


def test_expired_session_is_renewed_by_logging_in_again(fresh_standin):
    resource = resource_for(fresh_standin)
    assert resource.count_contacts() == 50
    old_session = resource.client.session_id
    fresh_standin.expire_sessions()
    assert resource.count_contacts() == 50
    assert resource.client.session_id != old_session


def test_expired_session_mid_stream_is_renewed_between_pages(tmp_path):
    standin = start_standin(tmp_path, contacts=4_100)
    try:
        resource = resource_for(standin)
        batches = resource.iter_contacts(batch_size=2_000)
        first = next(batches)
        standin.expire_sessions()  # the next page needs a new session
        assert first.num_rows + sum(batch.num_rows for batch in batches) == 4_100
    finally:
        standin.stop()


def test_a_bulk_export_that_loses_its_session_mid_way_fails_with_one_line_after_the_whole_pages(fresh_standin):
    """A Bulk 2.0 job's pages cannot be resumed under a new session: the extract stops with a CrmError, raised
    where the pages are read, after whole pages only (the next page is downloaded ahead of the caller)."""
    batches = resource_for(fresh_standin, bulk_threshold=1).iter_contacts(batch_size=10)  # 50 contacts: 5 pages
    rows = next(batches).num_rows
    fresh_standin.expire_sessions()
    with pytest.raises(CrmError, match="^Salesforce session expired while the call could not be repeated"):
        for batch in batches:
            rows += batch.num_rows
    assert rows in (10, 20)  # the first page, and the one read ahead before the session ended


def test_expired_bare_session_id_fails_with_one_line(fresh_standin):
    session = requests.Session()
    session.trust_env = False
    session.verify = str(fresh_standin.ca_bundle_path)
    session_id, _ = SalesforceLogin(username=USERNAME, password=PASSWORD, security_token=TOKEN,
                                    scratch_url=fresh_standin.login_url, session=session)
    resource = resource_for(fresh_standin, username=None, password=None, security_token=None,
                            instance_url=fresh_standin.url, session_id=session_id)
    fresh_standin.expire_sessions()
    with pytest.raises(CrmError) as caught:
        resource.count_contacts()
    assert str(caught.value) == NOT_RENEWABLE
    assert session_id not in str(caught.value)


def test_the_stand_in_answers_invalid_session_like_salesforce(fresh_standin):
    client = raw_client(fresh_standin)
    fresh_standin.expire_sessions()
    response = client.session.get(f"{fresh_standin.url}/services/data/v59.0/query", params={"q": "SELECT Id FROM Contact"},
                                  headers={"Authorization": f"Bearer {client.session_id}"})
    assert response.status_code == 401
    assert response.json() == [{"message": "Session expired or invalid", "errorCode": "INVALID_SESSION_ID"}]


def test_request_limit_exceeded_is_one_line(tmp_path):
    standin = start_standin(tmp_path, contacts=10, request_limit=3)
    try:
        resource = resource_for(standin)
        resource.count_contacts()  # request 1
        assert resource.client.api_usage["api-usage"].used == 1
        with pytest.raises(CrmError) as caught:
            list(resource.iter_contacts())  # describe (2), count (3), query (4: over)
        assert str(caught.value) == ("the Salesforce org's daily API request limit is exhausted (3/3 requests used): retry "
                                     "after the limit resets (rolling 24 h) or ask the Salesforce admin to raise it")
        response = resource.client.session.get(f"{standin.url}/services/data/v59.0/limits/",
                                               headers={"Authorization": f"Bearer {resource.client.session_id}"})
        assert response.status_code == 403 and response.json()[0]["errorCode"] == "REQUEST_LIMIT_EXCEEDED"
        assert response.headers["Sforce-Limit-Info"] == "api-usage=3/3"
    finally:
        standin.stop()


def test_sessions_end_after_their_ttl_and_are_renewed(tmp_path):
    from tests.waiting import wait_until

    standin = start_standin(tmp_path, contacts=5, session_ttl_seconds=0.3)
    try:
        resource = resource_for(standin)
        first_session = resource.client.session_id
        wait_until(lambda: not standin.org.session_valid(first_session), timeout=5, what="the session's TTL to pass")
        assert resource.count_contacts() == 5
        assert resource.client.session_id != first_session
    finally:
        standin.stop()


def test_gateway_errors_on_reads_are_retried(fresh_standin):
    resource = resource_for(fresh_standin, max_retries=3)
    resource.count_contacts()  # logged in
    fresh_standin.fail_next(2, status=503, retry_after=0)
    assert resource.count_contacts() == 50
    fresh_standin.fail_next(2, status=502)  # the call and its one retry
    with pytest.raises(CrmError) as caught:
        resource_for(fresh_standin, max_retries=1).count_contacts()
    assert str(caught.value).startswith("Salesforce answered HTTP 502:") and "\n" not in str(caught.value)
