"""The CRM as a Salesforce report export: the same canonical rows as the API gives for the same contacts."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys

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


@pytest.mark.parametrize("style", ["data-loader", "lower-case"])
def test_api_name_headers_match_in_any_case(standin, tmp_path, style):
    """Data Loader writes "ID","FIRSTNAME",...,"ACCOUNT.NAME","KOL_ID__C"; hand-saved files lower-case them."""
    header = [name.upper() if style == "data-loader" else name.lower() for name in EXPORT_COLUMNS]
    path = tmp_path / f"{style}.csv"
    write_export(path, standin.contacts()[:3], EXPORT_COLUMNS, header=header)
    rows = pa.Table.from_batches(list(CrmCsvResource(path=str(path), custom_fields={"specialty": "Specialty__c"})
                                      .iter_contacts())).to_pylist()
    assert rows == pa.Table.from_batches(list(resource_for(standin).iter_contacts())).slice(0, 3).to_pylist()


@pytest.mark.parametrize("case", [str, str.lower, str.upper], ids=["as-exported", "lower", "upper"])
def test_report_labels_are_accepted_in_any_case(standin, tmp_path, case):
    labels = ["Contact ID", "First Name", "Last Name", "Email", "Title", "Phone", "Department", "Account Name",
              "Mailing City", "Mailing State/Province", "Mailing Country"]
    path = tmp_path / "report.csv"
    write_export(path, standin.contacts()[:3], EXPORT_COLUMNS[:11], header=[case(label) for label in labels])
    rows = pa.Table.from_batches(list(CrmCsvResource(path=str(path)).iter_contacts())).to_pylist()
    assert [row["institution"] for row in rows] == ["Mass General", "Hospices Civils de Lyon", None]
    assert [row["first_name"] for row in rows] == [c["FirstName"] for c in standin.contacts()[:3]]
    assert rows[0]["external_id"] is None and rows[0]["last_modified"] is None and rows[0]["custom"] is None


def test_a_refusal_names_every_missing_column_and_the_headers_found(standin, tmp_path):
    path = tmp_path / "no-email.csv"
    columns = [c for c in EXPORT_COLUMNS[:11] if c not in ("Email", "Department")]
    write_export(path, standin.contacts()[:2], columns)
    with pytest.raises(CrmError) as caught:
        list(CrmCsvResource(path=str(path)).iter_contacts())
    assert str(caught.value) == (f"CRM export {path} lacks the columns Email, Department (found: {', '.join(columns)}): "
                                 "export them with the report (API names such as FirstName or report labels such as "
                                 "First Name, any case)")


@pytest.mark.parametrize("content", [b"", b"\xef\xbb\xbf", b"\r\n\r\n"], ids=["empty", "bom-only", "blank-lines"])
def test_an_empty_file_says_it_is_empty(tmp_path, content):
    path = tmp_path / "empty.csv"
    path.write_bytes(content)
    with pytest.raises(CrmError, match=r"is empty \(no header row\): export the contacts report again$"):
        list(CrmCsvResource(path=str(path)).iter_contacts())


def test_csv_crm_refuses_write_back(tmp_path):
    resource = CrmCsvResource(path=str(tmp_path / "x.csv"))
    assert resource.source_name == f"csv {tmp_path / 'x.csv'}"
    with pytest.raises(CrmError, match="write-back needs Salesforce"):
        resource.upsert_contacts([{"external_id": "kol_1"}])


def _commops_reconcile(data_dir, export) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SALESFORCE_")}
    env.update(COMMOPS_CRM_CSV=str(export), COMMOPS_DATA_DIR=str(data_dir))
    return subprocess.run([sys.executable, "-m", "commops_cli", "reconcile"], env=env, capture_output=True, text=True,
                          timeout=180)


def test_commops_reconcile_takes_a_data_loader_export_and_refuses_broken_ones_in_one_line(standin, data_dir, tmp_path):
    loader = tmp_path / "extract.csv"  # Data Loader: upper-case API names, every value quoted, no BOM
    write_export(loader, standin.contacts()[:120], EXPORT_COLUMNS, header=[c.upper() for c in EXPORT_COLUMNS], bom=False)
    done = _commops_reconcile(data_dir, loader)
    assert done.returncode == 0, done.stderr
    assert "120 contacts from csv" in done.stdout and "--apply" not in done.stdout
    assert "the CRM is a CSV export: nothing can be written back" in done.stdout

    labels = ["Contact ID", "First Name", "Last Name", "Title", "Phone", "Department", "Account Name", "Mailing City",
              "Mailing State/Province"]
    partial = tmp_path / "report.csv"
    write_export(partial, standin.contacts()[:3], [c for c in EXPORT_COLUMNS[:11] if c not in ("Email", "MailingCountry")],
                 header=labels)
    refused = _commops_reconcile(data_dir, partial)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert f"lacks the columns Email, MailingCountry (found: {', '.join(labels)})" in refused.stderr

    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    said = _commops_reconcile(data_dir, empty)
    assert said.returncode == 1 and said.stderr.count("\n") == 1 and f"CRM export {empty} is empty" in said.stderr
