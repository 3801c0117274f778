"""Which CRM the reconciliation reads: SALESFORCE_* and COMMOPS_CRM_CSV, one pydantic-settings model.

The secrets (SALESFORCE_PASSWORD, SALESFORCE_SECURITY_TOKEN, SALESFORCE_SESSION_ID) are not
fields: they reach SalesforceResource only as dg.EnvVar, so no settings object, run config or
Dagster storage holds their values. A CSV export (COMMOPS_CRM_CSV) wins over Salesforce.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from resources.crm.base import DEFAULT_MATCH_THRESHOLD
from resources.crm.csv_export import CrmCsvResource
from resources.crm.errors import CrmError
from resources.crm.mapping import DEFAULT_EXTERNAL_ID_FIELD, parse_custom_fields

if TYPE_CHECKING:
    from resources.crm.salesforce import SalesforceResource

PASSWORD_ENV = "SALESFORCE_PASSWORD"
SECURITY_TOKEN_ENV = "SALESFORCE_SECURITY_TOKEN"
SESSION_ID_ENV = "SALESFORCE_SESSION_ID"


class CrmSettings(BaseSettings):
    """Field names are the environment variables' names (case-insensitive)."""

    model_config = SettingsConfigDict(extra="ignore")

    salesforce_username: str | None = Field(default=None, description="Login user.")
    salesforce_domain: str = Field(default="login", description="login, test or a My Domain name.")
    salesforce_login_url: str | None = Field(default=None, description="Login host for a non-standard domain.")
    salesforce_instance_url: str | None = Field(default=None, description="Instance URL, with SALESFORCE_SESSION_ID.")
    salesforce_api_version: str = Field(default="59.0", description="REST API version without the v.")
    salesforce_ca_bundle: str | None = Field(default=None, description="PEM file of CAs to trust instead of the system store.")
    salesforce_external_id_field: str = Field(default=DEFAULT_EXTERNAL_ID_FIELD, description="External-id field of the KOL id.")
    salesforce_bulk_threshold: int = Field(default=10_000, ge=0, description="Record count above which Bulk 2.0 is used.")
    salesforce_custom_fields: str = Field(default="", description='JSON {canonical name: "Field__c"}.')
    commops_crm_csv: str | None = Field(default=None, description="Salesforce report export to read instead of Salesforce.")
    commops_crm_match_threshold: float = Field(default=DEFAULT_MATCH_THRESHOLD, ge=0, le=1,
                                               description="Score from which a pair is a probable match.")
    commops_undo_window_days: int = Field(default=30, ge=0, description="Days during which an applied change can be undone.")
    commops_review_url: str | None = Field(default=None, description="Address of the review page the report links to.")


NOT_CONFIGURED = (
    "no CRM is configured: set SALESFORCE_USERNAME (with SALESFORCE_PASSWORD and SALESFORCE_SECURITY_TOKEN), "
    "SALESFORCE_INSTANCE_URL with SALESFORCE_SESSION_ID, or COMMOPS_CRM_CSV (try `commops crm sandbox`)"
)


class NoCrmConfigured:
    """The `crm` resource where nothing is configured: using it fails with what to set."""

    source_name = "none"
    writable = False

    def _fail(self, *args: object, **kwargs: object) -> None:
        raise CrmError(NOT_CONFIGURED)

    iter_contacts = upsert_contacts = update_contacts = read_contacts = _fail


def build_crm_resource(settings: CrmSettings | None = None) -> SalesforceResource | CrmCsvResource | None:
    """The configured CRM: the CSV export when COMMOPS_CRM_CSV is set, else Salesforce when a user or an
    instance URL is set, else None (no CRM configured: the reconciliation is skipped)."""
    settings = settings or CrmSettings()
    parse_custom_fields(settings.salesforce_custom_fields)  # a bad value fails here, naming the variable
    if settings.commops_crm_csv:
        return CrmCsvResource(path=settings.commops_crm_csv, external_id_field=settings.salesforce_external_id_field,
                              custom_fields=settings.salesforce_custom_fields,
                              match_threshold=settings.commops_crm_match_threshold)
    if not (settings.salesforce_username or settings.salesforce_instance_url):
        return None
    # only variables that are set become EnvVars: Dagster refuses an EnvVar whose variable is missing
    from resources.crm.salesforce import SalesforceResource  # simple-salesforce only where Salesforce is the CRM

    secrets = {name: dg.EnvVar(env) for name, env in (("password", PASSWORD_ENV), ("security_token", SECURITY_TOKEN_ENV),
                                                      ("session_id", SESSION_ID_ENV)) if os.environ.get(env)}
    return SalesforceResource(
        username=settings.salesforce_username,
        domain=settings.salesforce_domain,
        login_url=settings.salesforce_login_url,
        instance_url=settings.salesforce_instance_url,
        api_version=settings.salesforce_api_version,
        ca_bundle=settings.salesforce_ca_bundle,
        external_id_field=settings.salesforce_external_id_field,
        bulk_threshold=settings.salesforce_bulk_threshold,
        custom_fields=settings.salesforce_custom_fields,
        match_threshold=settings.commops_crm_match_threshold,
        **secrets,
    )


def configured_crm_resource() -> SalesforceResource | CrmCsvResource:
    """The CRM the environment configures; CrmError in one line naming the variable when a setting is invalid,
    or saying what to set when none is."""
    from pydantic import ValidationError

    try:
        crm = build_crm_resource(CrmSettings())
    except ValidationError as error:
        problem = error.errors()[0]
        name = str(problem["loc"][0]).upper()
        raise CrmError(f"{name}={os.environ.get(name)!r}: {problem['msg']}") from None
    if crm is None:
        raise CrmError(NOT_CONFIGURED)
    return crm
