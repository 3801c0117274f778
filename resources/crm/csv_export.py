"""Contacts from a Salesforce report export (CSV) as a Dagster resource: the CRM without API access.

Read with pyarrow's streaming CSV reader, every column as text (ids and phone numbers must not
become numbers), UTF-8 with or without BOM. Headers are API names (Id, FirstName, Account.Name,
...; Data Loader writes them upper-case) or the report's labels ("Contact ID", "First Name",
"Account Name", ...), in any case.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from pydantic import Field

from resources.crm.base import MappedCrmResource
from resources.crm.errors import CrmError
from resources.crm.mapping import CONTACT_SCHEMA, REQUIRED_EXPORT_FIELDS, STANDARD_FIELDS, ContactMapping, parse_custom_fields, to_batch

# report labels (lower-cased) -> API names
REPORT_HEADERS = {
    "contact id": "Id", "first name": "FirstName", "last name": "LastName", "email": "Email", "title": "Title",
    "phone": "Phone", "business phone": "Phone", "department": "Department", "account name": "Account.Name",
    "mailing city": "MailingCity", "mailing state/province": "MailingState", "mailing state": "MailingState",
    "mailing country": "MailingCountry", "last modified date": "LastModifiedDate",
}


class CrmCsvResource(MappedCrmResource):
    """A Salesforce contact export at `path` (COMMOPS_CRM_CSV), with the same mapping as SalesforceResource."""

    path: str = Field(description="CSV file of a Salesforce contact report export (COMMOPS_CRM_CSV).")

    @property
    def source_name(self) -> str:
        return f"csv {self.path}"

    @property
    def writable(self) -> bool:
        return False

    def _header(self) -> list[str]:
        path = Path(self.path)
        try:
            with path.open(encoding="utf-8-sig", newline="") as handle:
                header = next(csv.reader(handle), [])
        except FileNotFoundError:
            raise CrmError(f"CRM export {path} does not exist: fix COMMOPS_CRM_CSV") from None
        except UnicodeDecodeError:
            raise CrmError(f"CRM export {path} is not UTF-8: export the report as CSV in UTF-8") from None
        if not any(name.strip() for name in header):
            raise CrmError(f"CRM export {path} is empty (no header row): export the contacts report again")
        return header

    def _api_names(self, header: list[str], custom: dict[str, str]) -> list[str]:
        """The header as API names, matched without regard to case: Data Loader writes ID, FIRSTNAME,
        ACCOUNT.NAME; Workbench Id, FirstName; a report export its labels (First Name, Account Name)."""
        known = {name.lower(): name for name in [*STANDARD_FIELDS.values(), *custom.values(),
                                                  *([self.external_id_field] if self.external_id_field else [])]}
        known.update(REPORT_HEADERS)
        api_names = [known.get(name.strip().lower(), name.strip()) for name in header]
        missing = [name for name in [*REQUIRED_EXPORT_FIELDS, *custom.values()] if name not in api_names]
        if missing:
            found = ", ".join(name.strip() for name in header)
            raise CrmError(f"CRM export {self.path} lacks the column{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(missing)} (found: {found}): export them with the report (API names such as "
                           "FirstName or report labels such as First Name, any case)")
        return api_names

    def iter_contacts(self, batch_size: int = 10_000) -> Iterator[pa.RecordBatch]:
        """The export's contacts as canonical RecordBatches (one per CSV block, about `batch_size` rows)."""
        custom = parse_custom_fields(self.custom_fields)
        api_names = self._api_names(self._header(), custom)
        external = self.external_id_field if self.external_id_field in api_names else None
        mapping = ContactMapping(external_id_field=external, custom_fields=custom)
        # ~200 bytes a contact row: blocks of about batch_size rows, at least 1 MiB
        read = pacsv.ReadOptions(column_names=api_names, skip_rows=1, block_size=max(1 << 20, batch_size * 200))
        convert = pacsv.ConvertOptions(column_types={name: pa.string() for name in api_names},
                                       strings_can_be_null=True, null_values=[""])
        try:
            reader = pacsv.open_csv(self.path, read_options=read, convert_options=convert)
            for batch in reader:
                yield to_batch(mapping.from_flat(row) for row in batch.to_pylist())
        except pa.ArrowInvalid as exc:
            raise CrmError(f"CRM export {self.path} is not a readable CSV ({str(exc).splitlines()[0]}): re-export it") from None

    def read_contacts(self, crm_ids: Sequence[str]) -> pa.Table:
        """The export's contacts with these Ids (CONTACT_SCHEMA): the export as it is, read-only."""
        wanted = pa.array(list(dict.fromkeys(crm_ids)), pa.string())
        batches = [batch.filter(pc.is_in(batch["crm_id"], value_set=wanted)) for batch in self.iter_contacts()]
        return pa.Table.from_batches(batches, schema=CONTACT_SCHEMA)

    def upsert_contacts(self, rows: Iterable[dict]) -> list:
        raise CrmError(f"the CRM is a CSV export ({self.path}): write-back needs Salesforce, unset COMMOPS_CRM_CSV")

    def update_contacts(self, rows: Iterable[dict]) -> list:
        raise CrmError(f"the CRM is a CSV export ({self.path}): write-back needs Salesforce, unset COMMOPS_CRM_CSV")
