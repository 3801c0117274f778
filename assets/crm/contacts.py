"""The canonical contact columns the CRM resource delivers (the contract with resources' CRM side),
and their conversion from Salesforce API records (used by tests and the planted data)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

CONTACTS = pa.schema(
    [
        ("crm_id", pa.string()),
        ("first_name", pa.string()),
        ("last_name", pa.string()),
        ("email", pa.string()),
        ("title", pa.string()),
        ("phone", pa.string()),
        ("department", pa.string()),
        ("institution", pa.string()),
        ("city", pa.string()),
        ("state", pa.string()),
        ("country", pa.string()),
        ("last_modified", pa.timestamp("us", tz="UTC")),
        ("external_id", pa.string()),
        ("custom", pa.string()),
    ]
)

# Canonical column -> Salesforce Contact API field ("Account.Name": the institution).
SALESFORCE_FIELDS = {
    "crm_id": "Id",
    "first_name": "FirstName",
    "last_name": "LastName",
    "email": "Email",
    "title": "Title",
    "phone": "Phone",
    "department": "Department",
    "institution": "Account.Name",
    "city": "MailingCity",
    "state": "MailingState",
    "country": "MailingCountry",
    "last_modified": "LastModifiedDate",
}


def _timestamp(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00").replace("+0000", "+00:00"))


def from_salesforce(
    records: Iterable[Mapping[str, Any]], external_id_field: str = "KOL_Id__c", custom_fields: Iterable[str] = ()
) -> pa.Table:
    """Canonical contact rows from Salesforce Contact records (flat "Account.Name" or nested Account)."""
    custom_fields = tuple(custom_fields)
    rows = []
    for record in records:
        row = {}
        for column, api_field in SALESFORCE_FIELDS.items():
            if api_field == "Account.Name":
                account = record.get("Account")
                row[column] = record.get(api_field, account.get("Name") if isinstance(account, Mapping) else None)
            else:
                row[column] = record.get(api_field)
        row["last_modified"] = _timestamp(row["last_modified"])
        row["external_id"] = record.get(external_id_field)
        custom = {name: record[name] for name in custom_fields if record.get(name) is not None}
        row["custom"] = json.dumps(custom) if custom else None
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=CONTACTS)
