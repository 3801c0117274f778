"""The CRM side of the reconciliation (issue 11): contacts from Salesforce or from a Salesforce report export.

mapping.py holds the canonical contact columns and their Salesforce fields, salesforce.py the
Salesforce resource (simple-salesforce, REST or Bulk 2.0), csv_export.py the CSV resource,
settings.py the SALESFORCE_* / COMMOPS_CRM_CSV settings and `build_crm_resource`.
"""

from resources.crm.errors import CrmError

__all__ = ["CrmError"]
