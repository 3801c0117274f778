"""What both CRM resources share: the external-id field, the admin's custom fields (the mapping's settings),
the probable-match threshold, and what a write reports per row."""

from __future__ import annotations

import json
from dataclasses import dataclass

import dagster as dg
from pydantic import Field, field_validator

from resources.crm.mapping import DEFAULT_EXTERNAL_ID_FIELD

DEFAULT_MATCH_THRESHOLD = 0.9  # chosen by benchmarks/crm_matching.py (docs/crm-decisions-reconciliation.md)


@dataclass(frozen=True)
class WriteResult:
    """One written row for the audit trail: the key it was sent under, the Contact Id, created or updated."""

    key: str
    crm_id: str | None
    created: bool
    success: bool
    error: str | None = None


class MappedCrmResource(dg.ConfigurableResource):
    external_id_field: str | None = Field(
        default=DEFAULT_EXTERNAL_ID_FIELD, description="Field (or export column) holding the KOL id (SALESFORCE_EXTERNAL_ID_FIELD)."
    )
    custom_fields: str = Field(default="", description='JSON object {canonical name: "Field__c"} (SALESFORCE_CUSTOM_FIELDS).')
    match_threshold: float = Field(default=DEFAULT_MATCH_THRESHOLD, ge=0, le=1,
                                   description="Score from which a pair is a probable match (COMMOPS_CRM_MATCH_THRESHOLD).")

    @field_validator("custom_fields", mode="before")
    @classmethod
    def _json_text(cls, value: object) -> object:
        """A dict is accepted and kept as JSON text (Dagster config stores scalars)."""
        if isinstance(value, dict):
            return json.dumps(value, sort_keys=True)
        return value
