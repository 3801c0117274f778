"""Logging in to the stand-in over HTTPS, as users configure it: credentials or a session id."""

from __future__ import annotations

import dagster as dg
import pytest
import requests
from simple_salesforce import SalesforceLogin
from simple_salesforce.exceptions import SalesforceAuthenticationFailed

from resources.crm import CrmError
from resources.crm.salesforce import SalesforceResource
from tests.crm.conftest import PASSWORD, TOKEN, USERNAME, resource_for, start_standin
from tests.file_modes import LOOSE_UMASK, mode, umask_of


def test_login_with_username_password_and_token(standin):
    resource = resource_for(standin)
    assert resource.count_contacts() == 4_500
    assert resource.client.sf_instance == standin.url.removeprefix("https://")


def test_login_with_instance_url_and_session_id(standin):
    session = requests.Session()
    session.trust_env = False
    session.verify = str(standin.ca_bundle_path)
    session_id, _ = SalesforceLogin(username=USERNAME, password=PASSWORD, security_token=TOKEN,
                                    scratch_url=standin.login_url, session=session)
    resource = resource_for(standin, username=None, password=None, security_token=None,
                            instance_url=standin.url, session_id=session_id)
    assert resource.count_contacts() == 4_500
    assert resource.source_name == f"salesforce {standin.url}"


def test_bad_credentials_give_one_line_without_the_password(standin):
    resource = resource_for(standin, password="wrong-password-123")
    with pytest.raises(CrmError) as caught:
        resource.count_contacts()
    message = str(caught.value)
    assert message == (f"Salesforce login failed for user {USERNAME} at {standin.login_url} (INVALID_LOGIN): "
                       "check SALESFORCE_USERNAME, SALESFORCE_PASSWORD and SALESFORCE_SECURITY_TOKEN")
    assert "wrong-password-123" not in message and TOKEN not in message
    assert "wrong-password-123" not in repr(resource)


def test_soap_fault_is_salesforces(standin):
    session = requests.Session()
    session.trust_env = False
    session.verify = str(standin.ca_bundle_path)
    with pytest.raises(SalesforceAuthenticationFailed) as caught:
        SalesforceLogin(username=USERNAME, password=PASSWORD, security_token="not-the-token",
                        scratch_url=standin.login_url, session=session)
    assert caught.value.code == "INVALID_LOGIN"


def test_a_client_without_the_ca_bundle_is_refused(standin):
    """The stand-in really speaks TLS with its own CA: trusting it takes SALESFORCE_CA_BUNDLE."""
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{standin.url}/services/data/", timeout=5)  # the system store (REQUESTS_CA_BUNDLE)
    resource = resource_for(standin, ca_bundle=None)
    with pytest.raises(CrmError) as caught:
        resource.count_contacts()
    assert str(caught.value).startswith(f"TLS verification of {standin.login_url} failed: set SALESFORCE_CA_BUNDLE")
    assert "\n" not in str(caught.value)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(standin.url.replace("https://", "http://") + "/services/data/", timeout=5)


def test_in_a_dagster_run_secrets_come_from_env_vars(standin, monkeypatch):
    monkeypatch.setenv("SALESFORCE_PASSWORD", PASSWORD)
    monkeypatch.setenv("SALESFORCE_SECURITY_TOKEN", TOKEN)

    @dg.asset
    def crm_contacts(crm: SalesforceResource) -> int:
        return sum(batch.num_rows for batch in crm.iter_contacts())

    resource = SalesforceResource(username=USERNAME, password=dg.EnvVar("SALESFORCE_PASSWORD"),
                                  security_token=dg.EnvVar("SALESFORCE_SECURITY_TOKEN"), login_url=standin.login_url,
                                  ca_bundle=str(standin.ca_bundle_path))
    result = dg.materialize([crm_contacts], resources={"crm": resource}, instance=dg.DagsterInstance.ephemeral())
    assert result.success and result.output_for_node("crm_contacts") == 4_500


def test_http_session_ignores_the_environment_and_always_has_a_timeout(standin, monkeypatch):
    from resources.crm.salesforce import http_session

    session = http_session(str(standin.ca_bundle_path), timeout=7.5, max_retries=2)
    assert session.trust_env is False and session.verify == str(standin.ca_bundle_path)
    adapter = session.get_adapter(standin.url)
    assert adapter.max_retries.status_forcelist == (502, 503, 504) and adapter.max_retries.respect_retry_after_header
    sent = {}
    original = requests.adapters.HTTPAdapter.send

    def spy(self, request, **kwargs):
        sent["timeout"] = kwargs.get("timeout")
        return original(self, request, **kwargs)

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", spy)
    session.get(f"{standin.url}/services/data/")
    assert sent["timeout"] == 7.5


def test_the_stand_ins_private_key_is_owner_only_under_a_loose_umask(tmp_path):
    with umask_of(LOOSE_UMASK):
        server = start_standin(tmp_path / "salesforce")
    try:
        key = tmp_path / "salesforce" / "salesforce-standin-server.pem"
        assert "PRIVATE KEY" in key.read_text()
        assert mode(key) == 0o600
        assert requests.get(f"{server.url}/services/data/", verify=str(server.ca_bundle_path), timeout=10).ok
    finally:
        server.stop()
