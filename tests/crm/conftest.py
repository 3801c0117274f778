"""One Salesforce stand-in (HTTPS, its own CA) for the CRM tests, seeded with SEEDED contacts;
tests that change data start their own with `fresh_standin`."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from simple_salesforce import Salesforce, SalesforceLogin

from resources.crm.salesforce import SalesforceResource
from crm.salesforce_standin import SalesforceStandIn
from tests.pipeline.conftest import start_service
from tests.pipeline.sync_support import sync

USERNAME = "integration@example.com"
PASSWORD = "correct horse battery"
TOKEN = "Tok3nTok3n"
SEEDED = 4_500
SYNCED_KOLS = 240
CITIES = [("Boston", "MA", "US"), ("Lyon", None, "FR"), (None, None, None), ("Toronto", "ON", "CA")]
ACCOUNTS = ["Mass General", "Hospices Civils de Lyon", None, "Sunnybrook, Toronto"]


def seed_contact(i: int) -> dict:
    """Contact number i: varied fields, some nulls, two contacts per email address below 10, every
    third contact without a KOL id."""
    city, state, country = CITIES[i % 4]
    return {
        "FirstName": f"First{i}" if i % 7 else None,
        "LastName": f"Last{i:05d}",
        "Email": f"Shared{i % 10}@Example.org" if i < 20 else f"person{i}@example.org",
        "Title": ["Dr", "Prof", None][i % 3],
        "Phone": f"+1 555 {i:04d}" if i % 5 else None,
        "Department": "Oncology" if i % 2 else "Cardiology",
        "Account.Name": ACCOUNTS[i % 4],
        "MailingCity": city, "MailingState": state, "MailingCountry": country,
        "KOL_Id__c": f"kol_{i:05d}" if i % 3 else None,
        "Specialty__c": "oncology, haematology" if i % 2 else None,
    }


def start_standin(directory, contacts: int = 0, **options) -> SalesforceStandIn:
    standin = SalesforceStandIn(directory, username=USERNAME, password=PASSWORD, security_token=TOKEN, **options)
    standin.start()
    standin.add_contacts(seed_contact(i) for i in range(contacts))
    return standin


@pytest.fixture(scope="session")
def standin(tmp_path_factory) -> Iterator[SalesforceStandIn]:
    """The shared org: read-only for tests (write tests use fresh_standin)."""
    server = start_standin(tmp_path_factory.mktemp("salesforce"), contacts=SEEDED)
    yield server
    server.stop()


@pytest.fixture
def fresh_standin(tmp_path) -> Iterator[SalesforceStandIn]:
    server = start_standin(tmp_path / "salesforce", contacts=50)
    yield server
    server.stop()


def resource_for(standin: SalesforceStandIn, **overrides) -> SalesforceResource:
    """A resource logging in to the stand-in by username, password and token (Bulk jobs polled at once)."""
    settings = dict(username=USERNAME, password=PASSWORD, security_token=TOKEN, login_url=standin.login_url,
                    ca_bundle=str(standin.ca_bundle_path), bulk_wait_seconds=0,
                    custom_fields={"specialty": "Specialty__c"})
    settings.update(overrides)
    return SalesforceResource(**settings)


def salesforce_env(standin: SalesforceStandIn) -> dict[str, str]:
    """The SALESFORCE_* variables that reach the stand-in (for reconcile_against and the commops CLI)."""
    return {"SALESFORCE_LOGIN_URL": standin.login_url, "SALESFORCE_USERNAME": USERNAME, "SALESFORCE_PASSWORD": PASSWORD,
            "SALESFORCE_SECURITY_TOKEN": TOKEN, "SALESFORCE_CA_BUNDLE": str(standin.ca_bundle_path)}


def raw_client(standin: SalesforceStandIn) -> Salesforce:
    """simple-salesforce itself, logged in the way SalesforceResource does it."""
    session = requests.Session()
    session.trust_env = False
    session.verify = str(standin.ca_bundle_path)
    session_id, instance = SalesforceLogin(username=USERNAME, password=PASSWORD, security_token=TOKEN,
                                           scratch_url=standin.login_url, session=session, sf_version="59.0")
    return Salesforce(session_id=session_id, instance_url=f"https://{instance}", session=session, version="59.0")


@pytest.fixture(scope="session")
def client(standin) -> Salesforce:
    return raw_client(standin)


@pytest.fixture(scope="session")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """A service with SYNCED_KOLS KOLs, synced once into a data directory that tests copy."""
    service = start_service(tmp_path_factory.mktemp("crm_service"), kols=SYNCED_KOLS, random_seed=7)
    data = tmp_path_factory.mktemp("crm_synced") / "data"
    sync(service, data)
    yield service, data
    service.server.stop()


@pytest.fixture
def data_dir(synced, tmp_path: Path) -> Path:
    """A private copy of the synced data directory (the reconciliation writes to its warehouse)."""
    _, data = synced
    copy = tmp_path / "data"
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns("dagster_home", "*.lock"))
    return copy
