"""The suppression list: keyed hashes only, fail closed without the key, lift logged; a sync's metadata
holds no personal data."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner

from commops_cli.commops import main
from commops_cli.sync_checks import SyncError
from commops_cli.sync_run import run_sync
from privacy.subject import Subject
from privacy.suppression import PRIVACY_KEY_ENV, PrivacyStore
from resources.settings import API_KEY_ENV
from tests.pipeline.sync_support import sync
from webhooks.receiver.server import ReceiverServer, ReceiverStartError
from webhooks.receiver.settings import ReceiverSettings

KEY = "test-privacy-key-not-a-secret"
EMAIL = "Someone.Private@Clinic.example "


@pytest.fixture
def listed(tmp_path, monkeypatch):
    monkeypatch.setenv(PRIVACY_KEY_ENV, KEY)
    data_dir = tmp_path / "data"
    PrivacyStore(data_dir).suppress(KEY.encode(), Subject(kol_ids=("kol_private1",), emails=(EMAIL,)))
    return data_dir


def test_the_list_holds_keyed_hashes_never_the_values(listed):
    raw = b"".join(p.read_bytes() for p in listed.rglob("*") if p.is_file()).lower()
    assert b"kol_private1" not in raw and b"someone.private" not in raw
    store = PrivacyStore(listed)
    assert store.listed() == 2
    assert store.is_listed(KEY.encode(), Subject(emails=("  someone.private@clinic.EXAMPLE",)))  # lower-cased, trimmed
    assert not store.is_listed(b"another key", Subject(kol_ids=("kol_private1",)))


def test_without_the_key_syncs_and_receivers_refuse_to_start_in_one_line(listed, monkeypatch):
    monkeypatch.delenv(PRIVACY_KEY_ENV)
    monkeypatch.setenv(API_KEY_ENV, "unused")
    with pytest.raises(SyncError) as refused:
        run_sync(base_url="http://127.0.0.1:9/v1", data_dir=listed, progress=False)
    assert PRIVACY_KEY_ENV in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ReceiverStartError) as receiver:
        ReceiverServer(ReceiverSettings(webhook_secrets="s1-" + "a" * 61, data_dir=listed)).start()
    assert PRIVACY_KEY_ENV in str(receiver.value) and "\n" not in str(receiver.value)


def test_lift_removes_the_entries_and_is_logged(listed):
    result = CliRunner().invoke(main, ["privacy", "erase", "--kol", "kol_private1", "--lift", "--data-dir", str(listed)])
    assert result.exit_code == 0, result.output
    assert "lifted" in result.output
    store = PrivacyStore(listed)
    assert store.listed() == 1  # the email stays listed: the lift named the id only
    assert [entry[2] for entry in store.entries()] == ["lift"]


def test_erase_without_the_key_fails_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(PRIVACY_KEY_ENV, raising=False)
    result = CliRunner().invoke(main, ["privacy", "erase", "--kol", "kol_x", "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 1
    assert PRIVACY_KEY_ENV in result.output and len(result.output.strip().splitlines()) == 1


def test_a_materializations_metadata_holds_no_kol_name_or_email(make_service, tmp_path):
    service = make_service(kols=0)  # the planted KOL is every preview's first row
    marker = {"full_name": "Dr Metamarkername", "specialties": ["cardiology"], "email": "metamarker@x.example",
              "title": "Metamarkertitle", "institution": "Metamarker Institute"}
    httpx.post(f"{service.base_url}/kols", json=marker, headers={"Authorization": f"Bearer {service.api_key}"},
               timeout=30).raise_for_status()
    summary = sync(service, tmp_path / "data", enrich_details_limit=20)
    metadata = repr([asset.metadata for asset in summary.assets]).lower()
    assert "lake/kols" in repr([a.asset for a in summary.assets]) and "kol_details" in repr([a.asset for a in summary.assets])
    assert "metamarker" not in metadata
