"""Which CRM resource the environment configures; secrets stay dg.EnvVars."""

from __future__ import annotations

import dagster as dg
import pytest

from resources.crm import CrmError
from resources.crm.csv_export import CrmCsvResource
from resources.crm.salesforce import SalesforceResource
from resources.crm.settings import CrmSettings, build_crm_resource


@pytest.fixture
def environment(monkeypatch):
    for name in ("SALESFORCE_USERNAME", "SALESFORCE_PASSWORD", "SALESFORCE_SECURITY_TOKEN", "SALESFORCE_SESSION_ID",
                 "SALESFORCE_INSTANCE_URL", "SALESFORCE_CUSTOM_FIELDS", "COMMOPS_CRM_CSV", "SALESFORCE_LOGIN_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_nothing_configured_is_none(environment):
    assert build_crm_resource() is None


def test_salesforce_from_the_environment_with_secrets_as_env_vars(environment):
    environment.setenv("SALESFORCE_USERNAME", "me@example.com")
    environment.setenv("SALESFORCE_PASSWORD", "s3cret-value")
    environment.setenv("SALESFORCE_SECURITY_TOKEN", "tok-value")
    environment.setenv("SALESFORCE_BULK_THRESHOLD", "500")
    environment.setenv("SALESFORCE_CUSTOM_FIELDS", '{"specialty": "Specialty__c"}')
    resource = build_crm_resource()
    assert isinstance(resource, SalesforceResource)
    assert resource.bulk_threshold == 500 and resource.source_name == "salesforce https://login.salesforce.com"
    assert isinstance(resource.password, dg.EnvVar) and resource.password.env_var_name == "SALESFORCE_PASSWORD"
    assert resource.session_id is None  # SALESFORCE_SESSION_ID unset: no EnvVar Dagster would refuse
    assert "s3cret-value" not in repr(resource) and "tok-value" not in repr(resource)


def test_csv_wins_over_salesforce(environment, tmp_path):
    environment.setenv("SALESFORCE_USERNAME", "me@example.com")
    environment.setenv("COMMOPS_CRM_CSV", str(tmp_path / "contacts.csv"))
    assert isinstance(build_crm_resource(), CrmCsvResource)


def test_bad_custom_fields_name_the_variable(environment):
    with pytest.raises(CrmError, match="SALESFORCE_CUSTOM_FIELDS is not valid JSON"):
        build_crm_resource(CrmSettings(salesforce_username="me", salesforce_custom_fields="{specialty"))
