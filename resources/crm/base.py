"""What both CRM resources share: the external-id field and the admin's custom fields (the mapping's settings)."""

from __future__ import annotations

import json

import dagster as dg
from pydantic import Field, field_validator

from resources.crm.mapping import DEFAULT_EXTERNAL_ID_FIELD


class MappedCrmResource(dg.ConfigurableResource):
    external_id_field: str | None = Field(
        default=DEFAULT_EXTERNAL_ID_FIELD, description="Field (or export column) holding the KOL id (SALESFORCE_EXTERNAL_ID_FIELD)."
    )
    custom_fields: str = Field(default="", description='JSON object {canonical name: "Field__c"} (SALESFORCE_CUSTOM_FIELDS).')

    @field_validator("custom_fields", mode="before")
    @classmethod
    def _json_text(cls, value: object) -> object:
        """A dict is accepted and kept as JSON text (Dagster config stores scalars)."""
        if isinstance(value, dict):
            return json.dumps(value, sort_keys=True)
        return value
