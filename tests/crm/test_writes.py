"""Write-back: upsert by the KOL external id, update by Id, Bulk 2.0 above the threshold; per-record results."""

from __future__ import annotations

import pytest
from simple_salesforce.exceptions import SalesforceMalformedRequest

from resources.crm import CrmError
from tests.crm.conftest import raw_client, resource_for


def by_kol(standin, kol_id: str) -> list[dict]:
    return [contact for contact in standin.contacts() if contact["KOL_Id__c"] == kol_id]


def test_upsert_creates_then_updates_without_duplicating(fresh_standin):
    resource = resource_for(fresh_standin)
    created = resource.upsert_contacts([{"external_id": "kol_new_1", "last_name": "Okafor", "email": "N.Okafor@Example.org",
                                         "custom": {"specialty": "neurology"}}])
    assert [(r.key, r.created, r.success, r.error) for r in created] == [("kol_new_1", True, True, None)]
    updated = resource.upsert_contacts([{"external_id": "kol_new_1", "title": "Dr", "email": None}])
    assert [(r.key, r.created, r.success) for r in updated] == [("kol_new_1", False, True)]
    assert updated[0].crm_id == created[0].crm_id and created[0].crm_id.startswith("003")
    [contact] = by_kol(fresh_standin, "kol_new_1")
    assert (contact["Title"], contact["LastName"], contact["Email"], contact["Specialty__c"]) == (
        "Dr", "Okafor", "n.okafor@example.org", "neurology")  # None left the email as it was; stored lower-cased


def test_record_errors_are_results_not_failures(fresh_standin):
    results = resource_for(fresh_standin).upsert_contacts([
        {"external_id": "kol_00001", "title": "Prof"},  # an existing contact
        {"external_id": "kol_nameless", "title": "Dr"},  # new, without the required LastName
    ])
    assert results[0].success and not results[0].created and results[0].crm_id
    assert not results[1].success and results[1].error.startswith("REQUIRED_FIELD_MISSING")


def test_duplicate_external_id_is_refused(fresh_standin):
    client = raw_client(fresh_standin)
    with pytest.raises(SalesforceMalformedRequest) as caught:
        client.Contact.create({"LastName": "Twin", "KOL_Id__c": "KOL_00001"})  # unique ignores case
    assert caught.value.content[0]["errorCode"] == "DUPLICATE_VALUE"
    other = fresh_standin.contacts()[0]["Id"]  # contact 0 has no KOL id
    results = resource_for(fresh_standin).update_contacts([{"crm_id": other, "external_id": "kol_00002"}])
    assert not results[0].success and results[0].error.startswith("DUPLICATE_VALUE")


def test_duplicate_emails_are_possible(fresh_standin):
    client = raw_client(fresh_standin)
    client.Contact.create({"LastName": "One", "Email": "same@example.org"})
    client.Contact.create({"LastName": "Two", "Email": "SAME@example.org"})
    assert client.query("SELECT COUNT() FROM Contact WHERE Email = 'same@example.org'")["totalSize"] == 2


def test_update_by_id(fresh_standin):
    contact = fresh_standin.contacts()[4]
    results = resource_for(fresh_standin).update_contacts([
        {"crm_id": contact["Id"], "title": "Chief of Medicine", "external_id": "kol_linked"},
        {"crm_id": "0035g00000zzzzzAAA", "title": "Dr"},
    ])
    assert [(r.crm_id, r.success) for r in results] == [(contact["Id"], True), ("0035g00000zzzzzAAA", False)]
    assert results[1].error.startswith("NOT_FOUND")
    [after] = [c for c in fresh_standin.contacts() if c["Id"] == contact["Id"]]
    assert (after["Title"], after["KOL_Id__c"]) == ("Chief of Medicine", "kol_linked")
    assert after["LastModifiedDate"] >= contact["LastModifiedDate"]


def test_bulk_upsert_of_a_large_batch(fresh_standin):
    resource = resource_for(fresh_standin, bulk_threshold=100)
    rows = [{"external_id": f"kol_{i:05d}", "last_name": f"Bulk{i}", "department": "Bulk"} for i in range(1, 1_501)]
    rows.append({"external_id": "kol_bulk_no_name", "title": "Dr"})
    results = resource.upsert_contacts(rows)
    assert [r.key for r in results] == [row["external_id"] for row in rows]  # input order
    existing = {f"kol_{i:05d}" for i in range(1, 50) if i % 3}  # seeded contacts with a KOL id
    assert {r.key for r in results if r.success and not r.created} == existing
    assert sum(r.created for r in results) == 1_500 - len(existing)
    assert not results[-1].success and "REQUIRED_FIELD_MISSING" in results[-1].error
    assert all(r.crm_id for r in results[:-1])
    assert [job.operation for job in fresh_standin.org.jobs.values()] == ["upsert"]
    assert len(fresh_standin.contacts()) == 50 + 1_500 - len(existing)


def test_bulk_update_by_id(fresh_standin):
    ids = [contact["Id"] for contact in fresh_standin.contacts()]
    results = resource_for(fresh_standin, bulk_threshold=10).update_contacts({"crm_id": i, "title": "Bulk"} for i in ids)
    assert all(r.success for r in results) and len(results) == 50
    assert {c["Title"] for c in fresh_standin.contacts()} == {"Bulk"}


def test_upsert_needs_an_external_id(fresh_standin):
    with pytest.raises(CrmError, match="no external_id"):
        resource_for(fresh_standin).upsert_contacts([{"last_name": "Nobody"}])


def test_bulk2_insert_and_download_as_simple_salesforce_calls_them(fresh_standin, tmp_path):
    client = raw_client(fresh_standin)
    [job] = client.bulk2.Contact.insert(records=[{"LastName": "Inserted", "Email": "New@Example.org"},
                                                 {"FirstName": "No last name"}], wait=0)
    assert (job["numberRecordsProcessed"], job["numberRecordsFailed"], job["numberRecordsTotal"]) == (2, 1, 2)
    outcome = client.bulk2.Contact.get_all_ingest_records(job["job_id"])
    assert outcome["successfulRecords"][0]["sf__Created"] == "true"
    assert outcome["failedRecords"][0]["sf__Error"].startswith("REQUIRED_FIELD_MISSING")
    assert outcome["unprocessedRecords"] == []
    results = client.bulk2.Contact.download("SELECT Id, Email FROM Contact WHERE LastName = 'Inserted'",
                                            path=str(tmp_path), max_records=1, wait=0)
    assert [result["number_of_records"] for result in results] == [1]
    assert open(results[0]["file"]).read().splitlines()[1].endswith('"new@example.org"')
