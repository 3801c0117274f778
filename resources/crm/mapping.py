"""Canonical contact columns and the Salesforce fields they come from (the reconciliation's contract).

Both CRM resources yield RecordBatches of CONTACT_SCHEMA, whichever way the contacts arrived:
a REST query record (relationships nested: {"Account": {"Name": ...}}), a Bulk 2.0 CSV row or a
report export row (flat: "Account.Name"). Salesforce stores no empty strings, so '' is NULL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field as dataclass_field
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from resources.crm.errors import CrmError

TIMESTAMP = pa.timestamp("us", tz="UTC")
DEFAULT_EXTERNAL_ID_FIELD = "KOL_Id__c"

# canonical column -> Salesforce field (relationship fields as Relationship.Field)
STANDARD_FIELDS: dict[str, str] = {
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
# what a report export must carry (LastModifiedDate and the external id are optional there)
REQUIRED_EXPORT_FIELDS = [name for name in STANDARD_FIELDS.values() if name != "LastModifiedDate"]
# fields write-back never sends: set by Salesforce, the key of the call, or on another object (Account)
NOT_WRITTEN = {"crm_id", "last_modified", "institution", "external_id", "custom"}


def _field(name: str, type_: pa.DataType, description: str) -> pa.Field:
    return pa.field(name, type_, nullable=True, metadata={"description": description})


CONTACT_SCHEMA = pa.schema([
    _field("crm_id", pa.string(), "Salesforce Contact Id (18 characters)"),
    _field("first_name", pa.string(), "First name (FirstName)"),
    _field("last_name", pa.string(), "Last name (LastName)"),
    _field("email", pa.string(), "Email as stored by Salesforce (lower-cased on save); duplicates are possible"),
    _field("title", pa.string(), "Title"),
    _field("phone", pa.string(), "Phone"),
    _field("department", pa.string(), "Department"),
    _field("institution", pa.string(), "Name of the contact's Account (Account.Name)"),
    _field("city", pa.string(), "Mailing city"),
    _field("state", pa.string(), "Mailing state or province"),
    _field("country", pa.string(), "Mailing country"),
    _field("last_modified", TIMESTAMP, "LastModifiedDate (UTC); NULL when a report export lacks the column"),
    _field("external_id", pa.string(), "The external-id field (default KOL_Id__c, the KOL id); NULL when the org lacks it"),
    _field("custom", pa.string(), "JSON object of the admin-mapped custom fields {canonical name: value}; NULL when none are mapped"),
])
# The contact's fields that hold a value per contact (the lake writes them without a dictionary).
CONTACT_UNIQUE = ("crm_id", "email", "phone", "external_id")
# An incremental extract's rows (resources/crm/salesforce.py contact_changes) carry two fields more.
CHANGE_FIELDS = ("SystemModstamp", "IsDeleted")
CHANGES_SCHEMA = CONTACT_SCHEMA.append(_field("system_modstamp", TIMESTAMP, "SystemModstamp (UTC)")).append(
    _field("is_deleted", pa.bool_(), "IsDeleted: in the recycle bin (queryAll)"))


def parse_custom_fields(value: str | Mapping[str, str] | None) -> dict[str, str]:
    """SALESFORCE_CUSTOM_FIELDS as a dict {canonical_name: "Field__c"} (JSON text or a mapping)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise CrmError(f"SALESFORCE_CUSTOM_FIELDS is not valid JSON ({exc.msg}): give an object such as "
                           '{"specialty": "Specialty__c"}') from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()):
        raise CrmError('SALESFORCE_CUSTOM_FIELDS must be a JSON object of names to field names, e.g. {"specialty": "Specialty__c"}')
    clash = sorted(set(value) & (set(STANDARD_FIELDS) | {"external_id", "custom"}))
    if clash:
        raise CrmError(f"SALESFORCE_CUSTOM_FIELDS maps {clash[0]!r}, a standard column: choose another name")
    return dict(value)


def parse_datetime(value: object) -> datetime | None:
    """Salesforce's date-time spellings (REST ...000+0000, Bulk ...000Z, report exports 2024-01-31 10:00) as UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = str(value).strip().replace("Z", "+00:00")
    if len(text) > 5 and text[-5] in "+-" and text[-3] != ":" and text[-4:].isdigit():
        text = text[:-2] + ":" + text[-2:]
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise CrmError(f"unreadable date-time {value!r} in LastModifiedDate: expected ISO 8601 (2024-01-31T10:00:00Z)") from None
    return parsed.astimezone(timezone.utc) if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() != "" else None


def timestamps(column: pa.Array) -> pa.Array:
    """A text column of Salesforce date-times as UTC timestamps (Arrow's cast, else parse_datetime row by row)."""
    try:
        return column.cast(TIMESTAMP)
    except pa.ArrowInvalid:  # a spelling Arrow does not read (an offset without a colon): row by row
        return pa.array([parse_datetime(value) for value in column.to_pylist()], TIMESTAMP)


@dataclass(frozen=True)
class ContactMapping:
    """Which Salesforce fields fill the canonical columns. `external_id_field` None: the org lacks one."""

    external_id_field: str | None = DEFAULT_EXTERNAL_ID_FIELD
    custom_fields: dict[str, str] = dataclass_field(default_factory=dict)

    def soql_fields(self) -> list[str]:
        """The SELECT list, in a fixed order: standard fields, the external id, the custom fields."""
        names = list(STANDARD_FIELDS.values())
        if self.external_id_field:
            names.append(self.external_id_field)
        names.extend(field for field in self.custom_fields.values() if field not in names)
        return names

    def from_record(self, record: Mapping) -> dict:
        """A canonical row from a REST query record (relationship fields nested, or null)."""
        def get(name: str) -> object:
            if "." in name:
                parent = record.get(name.partition(".")[0])
                return parent.get(name.partition(".")[2]) if isinstance(parent, Mapping) else None
            return record.get(name)
        return self._row(get)

    def from_flat(self, row: Mapping) -> dict:
        """A canonical row from a flat row keyed by API names ("Account.Name"): Bulk 2.0 CSV, report export."""
        return self._row(row.get)

    def from_columns(self, table: pa.Table) -> pa.RecordBatch:
        """The canonical batch of a table of text columns named by API names (a parsed Bulk 2.0 CSV page): what
        from_flat gives row by row, column by column (a missing column is NULL, blank text NULL)."""
        def text(name: str | None) -> pa.Array:
            if name is None or name not in table.column_names:
                return pa.nulls(table.num_rows, pa.string())
            column = table.column(name).combine_chunks().cast(pa.string())
            return pc.if_else(pc.equal(pc.utf8_trim_whitespace(column), ""), pa.scalar(None, pa.string()), column)

        columns = {column: text(name) for column, name in STANDARD_FIELDS.items() if column != "last_modified"}
        columns["last_modified"] = timestamps(text("LastModifiedDate"))
        columns["external_id"] = text(self.external_id_field)
        if self.custom_fields:
            values = {column: text(name).to_pylist() for column, name in self.custom_fields.items()}
            columns["custom"] = pa.array([json.dumps(dict(zip(values, row)), sort_keys=True) for row in zip(*values.values())],
                                         pa.string())
        else:
            columns["custom"] = pa.nulls(table.num_rows, pa.string())
        return pa.RecordBatch.from_arrays([columns[name] for name in CONTACT_SCHEMA.names], schema=CONTACT_SCHEMA)

    def _row(self, get) -> dict:
        row = {column: _text(get(name)) for column, name in STANDARD_FIELDS.items() if column != "last_modified"}
        row["last_modified"] = parse_datetime(get("LastModifiedDate"))
        row["external_id"] = _text(get(self.external_id_field)) if self.external_id_field else None
        row["custom"] = (json.dumps({column: _text(get(name)) for column, name in self.custom_fields.items()}, sort_keys=True)
                         if self.custom_fields else None)
        return row

    def to_salesforce(self, row: Mapping, with_external_id: bool = False) -> dict:
        """The Salesforce fields a write-back sends for a canonical row: writable columns that have a value
        (None means "leave as it is"; row["clear"] lists the columns to empty), plus mapped custom fields given in
        row["custom"] (dict or JSON text).
        `with_external_id`: also write external_id (an update linking a contact to its KOL id)."""
        data = {STANDARD_FIELDS[column]: value for column, value in row.items()
                if column in STANDARD_FIELDS and column not in NOT_WRITTEN and value is not None}
        for column in row.get("clear", ()):  # fields to empty (an undo writing back "no value")
            if column in STANDARD_FIELDS and column not in NOT_WRITTEN:
                data[STANDARD_FIELDS[column]] = None
            elif column == "external_id" and self.external_id_field and with_external_id:
                data[self.external_id_field] = None
            elif column.startswith("custom.") and column.removeprefix("custom.") in self.custom_fields:
                data[self.custom_fields[column.removeprefix("custom.")]] = None
            else:
                raise CrmError(f"cannot empty {column!r}: write-back does not write it")
        if with_external_id and row.get("external_id") is not None:
            if not self.external_id_field:
                raise CrmError("Contact has no external-id field: set SALESFORCE_EXTERNAL_ID_FIELD to write external_id")
            data[self.external_id_field] = row["external_id"]
        custom = row.get("custom")
        if isinstance(custom, str):
            custom = json.loads(custom)
        for column, value in (custom or {}).items():
            if column not in self.custom_fields:
                raise CrmError(f"custom column {column!r} is not mapped: add it to SALESFORCE_CUSTOM_FIELDS")
            if value is not None:
                data[self.custom_fields[column]] = value
        return data


def to_batch(rows: Iterable[dict]) -> pa.RecordBatch:
    """Canonical rows as one RecordBatch of CONTACT_SCHEMA."""
    return pa.RecordBatch.from_pylist(list(rows), schema=CONTACT_SCHEMA)
