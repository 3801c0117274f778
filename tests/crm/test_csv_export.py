"""The CRM as a Salesforce report export: the same canonical rows as the API gives for the same contacts."""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import pytest

from resources.crm import CrmError
from resources.crm.csv_export import CrmCsvResource
from resources.crm.mapping import CONTACT_SCHEMA
from tests.crm.conftest import resource_for

EXPORT_COLUMNS = ["Id", "FirstName", "LastName", "Email", "Title", "Phone", "Department", "Account.Name",
                  "MailingCity", "MailingState", "MailingCountry", "KOL_Id__c", "Specialty__c", "LastModifiedDate"]


def write_export(path, contacts: list[dict], columns: list[str], header: list[str] | None = None, bom: bool = True) -> None:
    """What Salesforce's "Export > CSV" writes: UTF-8 with a BOM (or without: re-saved files), every value quoted."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerow(header or columns)
    for contact in contacts:
        writer.writerow(["" if contact.get(column) is None else contact[column] for column in columns])
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + buffer.getvalue().encode("utf-8"))


@pytest.mark.parametrize("bom", [True, False], ids=["bom", "no-bom"])
def test_export_reads_to_the_same_rows_as_salesforce(standin, tmp_path, bom):
    contacts = standin.contacts()[:600]
    contacts[1]["LastName"] = "Ødegård, Jr."  # non-ASCII and a quoted comma
    path = tmp_path / "contacts.csv"
    write_export(path, contacts, EXPORT_COLUMNS, bom=bom)
    from_csv = pa.Table.from_batches(list(CrmCsvResource(path=str(path), custom_fields={"specialty": "Specialty__c"})
                                          .iter_contacts(batch_size=100)))
    assert from_csv.schema.equals(CONTACT_SCHEMA)
    from_api = pa.Table.from_batches(list(resource_for(standin).iter_contacts())).slice(0, 600).to_pylist()
    from_api[1]["last_name"] = "Ødegård, Jr."
    assert from_csv.to_pylist() == from_api


def test_report_labels_are_accepted(standin, tmp_path):
    labels = ["Contact ID", "First Name", "Last Name", "Email", "Title", "Phone", "Department", "Account Name",
              "Mailing City", "Mailing State/Province", "Mailing Country"]
    path = tmp_path / "report.csv"
    write_export(path, standin.contacts()[:3], EXPORT_COLUMNS[:11], header=labels)
    rows = pa.Table.from_batches(list(CrmCsvResource(path=str(path)).iter_contacts())).to_pylist()
    assert [row["institution"] for row in rows] == ["Mass General", "Hospices Civils de Lyon", None]
    assert rows[0]["external_id"] is None and rows[0]["last_modified"] is None and rows[0]["custom"] is None


def test_missing_column_names_it_and_the_file(standin, tmp_path):
    path = tmp_path / "no-email.csv"
    write_export(path, standin.contacts()[:2], [c for c in EXPORT_COLUMNS if c != "Email"])
    with pytest.raises(CrmError) as caught:
        list(CrmCsvResource(path=str(path)).iter_contacts())
    assert str(caught.value) == f"CRM export {path} lacks the column Email: export it with the report"


def test_csv_crm_refuses_write_back(tmp_path):
    resource = CrmCsvResource(path=str(tmp_path / "x.csv"))
    assert resource.source_name == f"csv {tmp_path / 'x.csv'}"
    with pytest.raises(CrmError, match="write-back needs Salesforce"):
        resource.upsert_contacts([{"external_id": "kol_1"}])
