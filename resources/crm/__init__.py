"""The CRM side of the reconciliation: contacts from Salesforce or from a Salesforce report export.

mapping.py holds the canonical contact columns and their Salesforce fields, salesforce.py the
Salesforce resource (simple-salesforce, REST or Bulk 2.0), csv_export.py the CSV resource,
settings.py the SALESFORCE_* / COMMOPS_CRM_CSV settings and `build_crm_resource`.

simple-salesforce (with its SOAP stack, ~28 MB) is imported only where Salesforce is the CRM: every run loads
this package with the code location, and a nightly sync does not need it.
"""

from resources.crm.base import WriteResult
from resources.crm.csv_export import CrmCsvResource
from resources.crm.errors import CrmError
from resources.crm.mapping import CONTACT_SCHEMA, ContactMapping
from resources.crm.settings import (
    NOT_CONFIGURED,
    CrmSettings,
    NoCrmConfigured,
    build_crm_resource,
    configured_crm_resource,
)

__all__ = ["CONTACT_SCHEMA", "NOT_CONFIGURED", "ContactMapping", "CrmCsvResource", "CrmError", "CrmSettings",
           "NoCrmConfigured", "SalesforceResource", "WriteResult", "build_crm_resource",
           "configured_crm_resource"]


def __getattr__(name: str):
    if name == "SalesforceResource":
        from resources.crm.salesforce import SalesforceResource

        return SalesforceResource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
