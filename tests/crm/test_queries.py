"""Reading contacts: REST paging, Bulk 2.0 above the threshold, and the SOQL subset the stand-in answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from simple_salesforce import format_soql
from simple_salesforce.exceptions import SalesforceMalformedRequest

from crm.salesforce_standin.soql import parse
from crm.salesforce_standin.store import ContactStore
from resources.crm.mapping import CONTACT_SCHEMA
from tests.crm.conftest import SEEDED, raw_client, resource_for


def test_query_all_iter_pages_every_contact_once_in_order(standin, client):
    records = list(client.query_all_iter("SELECT Id, Account.Name FROM Contact ORDER BY Id"))
    ids = [record["Id"] for record in records]
    assert len(ids) == SEEDED and len(set(ids)) == SEEDED
    assert ids == sorted(ids)
    first = client.query("SELECT Id FROM Contact")
    assert (first["totalSize"], first["done"], len(first["records"])) == (SEEDED, False, 2_000)
    assert first["nextRecordsUrl"].startswith("/services/data/v59.0/query/") and first["nextRecordsUrl"].endswith("-2000")
    assert records[0]["attributes"] == {"type": "Contact", "url": f"/services/data/v59.0/sobjects/Contact/{ids[0]}"}
    assert records[0]["Account"]["Name"] == "Mass General" and records[0]["Account"]["attributes"]["type"] == "Account"
    assert records[2]["Account"] is None


def test_iter_contacts_streams_canonical_batches(standin):
    batches = list(resource_for(standin).iter_contacts(batch_size=1_000))
    assert [batch.num_rows for batch in batches] == [1_000] * 4 + [500]
    assert all(batch.schema.equals(CONTACT_SCHEMA) for batch in batches)
    rows = pa.Table.from_batches(batches).to_pylist()
    assert len({row["crm_id"] for row in rows}) == SEEDED
    row = rows[1]  # contact 1
    assert row["first_name"] == "First1" and row["last_name"] == "Last00001" and row["email"] == "shared1@example.org"
    assert row["institution"] == "Hospices Civils de Lyon" and row["city"] == "Lyon" and row["state"] is None
    assert row["external_id"] == "kol_00001" and row["custom"] == '{"specialty": "oncology, haematology"}'
    assert row["last_modified"].tzinfo is not None
    assert rows[0]["external_id"] is None and rows[0]["first_name"] is None


def test_bulk_query_above_the_threshold_gives_the_same_rows(standin):
    before = standin.request_count
    rest = pa.Table.from_batches(list(resource_for(standin).iter_contacts())).sort_by("crm_id")
    bulk_resource = resource_for(standin, bulk_threshold=1_000)
    bulk = pa.Table.from_batches(list(bulk_resource.iter_contacts(batch_size=2_000))).sort_by("crm_id")
    assert bulk.to_pylist() == rest.to_pylist()
    assert any(job.operation == "query" for job in standin.org.jobs.values())
    assert standin.request_count > before


def test_bulk_results_name_relationship_columns_as_salesforce_does(client):
    pages = list(client.bulk2.Contact.query("SELECT Id, Account.Name, IsDeleted FROM Contact LIMIT 3", wait=0))
    assert pages[0].splitlines()[:2][0] == '"Id","Account.Name","IsDeleted"'
    assert pages[0].splitlines()[1].endswith(',"Mass General","false"')


def test_bulk_results_spell_values_as_salesforce_does(fresh_standin):
    """Every value quoted (quotes doubled, line breaks kept inside), date-times in UTC with milliseconds and Z,
    booleans true/false, an empty field for null; the header too; pages cut at maxRecords."""
    contact_id = fresh_standin.store.create({"LastName": 'O"Brien', "Title": "Head\nof cardiology", "Phone": None})
    fresh_standin.store.contacts[contact_id]["CreatedDate"] = datetime(2026, 3, 1, 14, 5, 9, 250000, tzinfo=UTC)
    client = raw_client(fresh_standin)
    soql = format_soql("SELECT Id, LastName, Title, Phone, IsDeleted, CreatedDate FROM Contact WHERE Id = {}", contact_id)
    pages = list(client.bulk2.Contact.query(soql, wait=0))
    assert pages == ['"Id","LastName","Title","Phone","IsDeleted","CreatedDate"\n'
                     f'"{contact_id}","O""Brien","Head\nof cardiology","","false","2026-03-01T14:05:09.250Z"\n']
    sizes = [len(page.splitlines()) - 1 for page in client.bulk2.Contact.query("SELECT Id FROM Contact", max_records=20, wait=0)]
    assert sizes == [20, 20, 11]


def ids(client, soql: str) -> list[str]:
    return [record["Id"] for record in client.query_all(soql)["records"]]


def count(client, soql: str) -> int:
    return client.query(soql)["totalSize"]


def test_soql_where_operators(client):
    assert count(client, "SELECT COUNT() FROM Contact WHERE LastName = 'LAST00003'") == 1  # = ignores case
    assert count(client, "SELECT COUNT() FROM Contact WHERE Email = 'shared3@example.org'") == 2  # duplicates exist
    assert count(client, "SELECT COUNT() FROM Contact WHERE Title != 'Dr'") == SEEDED - 1_500  # nulls included
    assert count(client, "SELECT COUNT() FROM Contact WHERE Title = null") == 1_500
    assert count(client, "SELECT COUNT() FROM Contact WHERE Title != null") == 3_000
    assert count(client, format_soql("SELECT COUNT() FROM Contact WHERE KOL_Id__c IN {}", ["kol_00001", "KOL_00002", "nope"])) == 2
    assert count(client, "SELECT COUNT() FROM Contact WHERE MailingCountry NOT IN ('US', 'FR')") == 2_250  # nulls too
    assert count(client, "SELECT COUNT() FROM Contact WHERE Email LIKE 'SHARED%'") == 20
    assert count(client, "SELECT COUNT() FROM Contact WHERE LastName LIKE 'Last0000_'") == 10
    assert count(client, format_soql("SELECT COUNT() FROM Contact WHERE Account.Name LIKE '%{:like}%'", ", T")) == 1_125
    assert count(client, "SELECT COUNT() FROM Contact WHERE Account.Name = null") == 1_125
    assert count(client, "SELECT COUNT() FROM Contact WHERE (MailingCountry = 'US' OR MailingCountry = 'CA') "
                         "AND NOT Department = 'Oncology'") == 1_125
    assert count(client, "SELECT COUNT() FROM Contact WHERE LastModifiedDate > 2000-01-01T00:00:00Z AND IsDeleted = false") == SEEDED


def test_soql_format_soql_escapes_round_trip(client):
    assert count(client, format_soql("SELECT COUNT() FROM Contact WHERE LastName = {}", "O'Brien \\ \"x\"\n")) == 0
    assert count(client, format_soql("SELECT COUNT() FROM Contact WHERE Account.Name = {}", "Sunnybrook, Toronto")) == 1_125


def test_soql_order_by_and_limit(client):
    records = client.query("SELECT Id, Title, LastName FROM Contact ORDER BY Title DESC NULLS LAST, LastName ASC LIMIT 5")["records"]
    assert [r["Title"] for r in records] == ["Prof"] * 5
    assert [r["LastName"] for r in records] == ["Last00001", "Last00004", "Last00007", "Last00010", "Last00013"]
    nulls_first = client.query("SELECT Id, Title FROM Contact ORDER BY Title LIMIT 1")["records"]
    assert nulls_first[0]["Title"] is None  # ascending puts nulls first, as Salesforce does


def test_soql_errors_have_salesforces_shape(client):
    with pytest.raises(SalesforceMalformedRequest) as caught:
        client.query("SELECT Id FROM Contact WHERE")
    assert caught.value.status == 400 and caught.value.content[0]["errorCode"] == "MALFORMED_QUERY"
    with pytest.raises(SalesforceMalformedRequest) as caught:
        client.query("SELECT Id, Nope__c FROM Contact")
    assert caught.value.content[0]["errorCode"] == "INVALID_FIELD" and "Nope__c" in caught.value.content[0]["message"]
    with pytest.raises(SalesforceMalformedRequest) as caught:
        client.query("SELECT Id FROM Contact WHERE CreatedDate > '2024-01-01'")
    assert caught.value.content[0]["errorCode"] == "INVALID_FIELD"


def test_describe_marks_the_external_id_and_the_account_relationship(client):
    fields = {field["name"]: field for field in client.Contact.describe()["fields"]}
    assert fields["KOL_Id__c"]["externalId"] and fields["KOL_Id__c"]["unique"]
    assert not fields["Email"]["unique"]
    assert fields["AccountId"]["relationshipName"] == "Account"
    assert not fields["LastModifiedDate"]["updateable"]


def test_field_names_take_the_orgs_spelling_and_a_missing_custom_field_is_named(standin):
    from resources.crm import CrmError

    resource = resource_for(standin, external_id_field="kol_id__C", custom_fields={"specialty": "SPECIALTY__c"}, bulk_threshold=1)
    row = next(resource.iter_contacts(batch_size=10)).to_pylist()[1]
    assert (row["external_id"], row["custom"]) == ("kol_00001", '{"specialty": "oncology, haematology"}')
    with pytest.raises(CrmError) as caught:
        list(resource_for(standin, custom_fields={"tier": "Tier_Level__c"}).iter_contacts())
    assert str(caught.value) == "SALESFORCE_CUSTOM_FIELDS names Tier_Level__c, which Contact lacks: fix the field name"
    assert resource_for(standin, external_id_field="Missing_Kol__c").mapping.external_id_field is None


def test_a_query_for_contacts_stamped_since_a_time_finds_what_a_scan_finds_whatever_the_clock_did():
    """The stand-in reads the contacts stamped since a time through its SystemModstamp index; the records and their
    order are a full scan's, after updates, deletes and a clock set back."""
    now = [datetime(2026, 5, 1, 8, 0, 0, tzinfo=UTC)]
    store = ContactStore(clock=lambda: now[0])
    ids = []
    for n in range(60):
        now[0] += timedelta(seconds=n % 3)
        ids.append(store.create({"LastName": f"Last{n}", "Email": f"c{n}@example.org"}))

    def both(where: str, include_deleted: bool) -> tuple[list[str], list[str]]:
        indexed = store.run(parse(f"SELECT Id FROM Contact WHERE {where}"), include_deleted)[1]
        scanned = store.run(parse(f"SELECT Id FROM Contact WHERE NOT (NOT ({where}))"), include_deleted)[1]
        return [r["Id"] for r in indexed], [r["Id"] for r in scanned]

    def check(since: datetime) -> None:
        stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
        for where in (f"SystemModstamp >= {stamp}", f"SystemModstamp > {stamp}",
                      f"systemmodstamp >= {stamp} AND LastName LIKE 'Last1%'"):
            for include_deleted in (False, True):
                indexed, scanned = both(where, include_deleted)
                assert indexed == scanned, (where, include_deleted)

    middle = now[0] - timedelta(seconds=20)
    check(middle)
    for contact_id in ids[::7]:
        now[0] += timedelta(seconds=1)
        store.update(contact_id, {"Title": "Chief"})
    store.delete(ids[3])
    check(middle)
    check(now[0])
    found = [r["Id"] for r in store.run(parse(f"SELECT Id FROM Contact WHERE SystemModstamp >= "
                                              f"{now[0].strftime('%Y-%m-%dT%H:%M:%SZ')}"), True)[1]]
    assert found == [ids[3], ids[56]]  # the deleted one and the last one updated, once each, in creation order
    latest = now[0]
    now[0] -= timedelta(hours=1)  # the clock set back: stamps earlier than those before them
    for contact_id in ids[:40]:
        store.update(contact_id, {"Title": "Back"})
    check(now[0])
    check(middle)
    check(latest)
