"""Service addresses carry no credentials and, off loopback, no API key in clear: `commops orgs add`,
`commops sync` and the registry refuse a user:password@ in one line that does not repeat it, and
plain http:// to a host other than loopback unless opted into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pipeline.test_orgs import commops, one_line

PASSWORD = "S3cretPw-xyz"
WITH_CREDENTIALS = [f"http://user:{PASSWORD}@127.0.0.1:9/v1", f"https://:{PASSWORD}@commops.example.com/v1"]


def files_holding(directory: Path, text: str) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.parametrize("base_url", WITH_CREDENTIALS)
def test_orgs_add_refuses_a_base_url_with_credentials_without_repeating_them(tmp_path, base_url):
    data = tmp_path / "data"
    result = commops("orgs", "add", "acme", "--base-url", base_url, "--api-key-env", "ACME_KEY",
                     "--data-dir", str(data), env={"ACME_KEY": "k"})
    line = one_line(result)
    assert line.startswith("commops orgs add failed: --base-url must not hold a user or password"), line
    assert PASSWORD not in result.stdout + result.stderr
    assert not (data / "orgs.json").exists() and files_holding(data, PASSWORD) == []


@pytest.mark.parametrize("base_url", WITH_CREDENTIALS)
def test_sync_refuses_a_commops_base_url_with_credentials_before_any_work(tmp_path, base_url):
    data = tmp_path / "data"
    result = commops("sync", "--no-progress", "--data-dir", str(data),
                     env={"COMMOPS_BASE_URL": base_url, "COMMOPS_API_KEY": "k"})
    line = one_line(result)
    assert line.startswith("commops sync failed: COMMOPS_BASE_URL must not hold a user or password"), line
    assert PASSWORD not in result.stdout + result.stderr
    assert not data.exists() or files_holding(data, PASSWORD) == []


def test_orgs_list_refuses_a_commops_base_url_with_credentials(tmp_path):
    result = commops("orgs", "list", "--data-dir", str(tmp_path / "data"),
                     env={"COMMOPS_BASE_URL": WITH_CREDENTIALS[1]})
    assert "must not hold a user or password" in one_line(result)
    assert PASSWORD not in result.stdout + result.stderr


def test_plain_http_off_loopback_needs_the_opt_in(tmp_path):
    data = str(tmp_path / "data")
    env = {"ACME_KEY": "k"}
    refused = one_line(commops("orgs", "add", "acme", "--base-url", "http://commops.example.com/v1",
                               "--api-key-env", "ACME_KEY", "--data-dir", data, env=env))
    assert refused == ("commops orgs add failed: --base-url=http://commops.example.com/v1: plain http:// would send "
                       "the API key unencrypted to commops.example.com; use https://, or opt in with --allow-insecure-http")
    synced = one_line(commops("sync", "--no-progress", "--data-dir", data,
                              env={"COMMOPS_BASE_URL": "http://10.1.2.3:8000/v1", "COMMOPS_API_KEY": "k"}))
    assert synced.endswith("use https://, or opt in with COMMOPS_ALLOW_INSECURE_HTTP=true"), synced

    added = commops("orgs", "add", "acme", "--base-url", "http://commops.example.com/v1", "--api-key-env", "ACME_KEY",
                    "--allow-insecure-http", "--data-dir", data, env=env)
    assert added.returncode == 0, added.stderr
    [entry] = json.loads((tmp_path / "data" / "orgs.json").read_text())["orgs"]
    assert entry["allow_insecure_http"] is True  # recorded: its runs, wherever they execute, need no variable
    listed = commops("orgs", "list", "--data-dir", data,
                     env={**env, "COMMOPS_BASE_URL": "http://commops.example.com/v1",
                          "COMMOPS_ALLOW_INSECURE_HTTP": "true"})
    assert listed.returncode == 0, listed.stderr
    assert "acme" in listed.stdout and "default" in listed.stdout


@pytest.mark.parametrize("base_url", ["http://localhost:9/v1", "http://[::1]:9/v1"])
def test_loopback_http_needs_no_opt_in(tmp_path, base_url):
    added = commops("orgs", "add", "acme", "--base-url", base_url, "--api-key-env", "ACME_KEY",
                    "--data-dir", str(tmp_path / "data"), env={"ACME_KEY": "k"})
    assert added.returncode == 0, added.stderr


def test_a_registry_entry_edited_to_hold_a_password_or_plain_http_is_refused_as_read(tmp_path):
    data = tmp_path / "data"
    added = commops("orgs", "add", "acme", "--base-url", "https://commops.example.com/v1", "--api-key-env", "ACME_KEY",
                    "--data-dir", str(data), env={"ACME_KEY": "k"})
    assert added.returncode == 0, added.stderr
    registry = data / "orgs.json"
    for edited in (f"https://user:{PASSWORD}@commops.example.com/v1", "http://commops.example.com/v1"):
        registry.write_text(json.dumps({"orgs": [{"name": "acme", "base_url": edited, "api_key_env": "ACME_KEY"}]}))
        result = commops("sync", "--org", "acme", "--data-dir", str(data), env={"ACME_KEY": "k"})
        line = one_line(result)
        assert line.startswith(f"commops sync failed (acme): {registry} holds an invalid organization (--base-url"), line
        assert PASSWORD not in result.stdout + result.stderr


def test_the_postgres_registry_gains_the_opt_in_column_and_checks_its_rows_as_read(postgres, tmp_path):
    from resources.orgs import Org, OrgRegistry, check_org
    from resources.settings import SettingsError

    postgres.create_database("orgs_checked")
    url = f"postgresql://postgres@{postgres.host}:{postgres.port}/orgs_checked"
    postgres.execute("CREATE TABLE commops_orgs (name TEXT PRIMARY KEY, base_url TEXT NOT NULL, "  # the first schema
                     "api_key_env TEXT NOT NULL, organization_id TEXT UNIQUE)", database="orgs_checked")
    postgres.execute("INSERT INTO commops_orgs VALUES ('acme', 'https://acme.example/v1', 'ACME_KEY', NULL)",
                     database="orgs_checked")
    registry = OrgRegistry(tmp_path, url)
    assert registry.registered() == [Org("acme", "https://acme.example/v1", "ACME_KEY", None, False)]
    registry.add(check_org("beta", "http://beta.example/v1", "BETA_KEY", None, allow_insecure_http=True))
    assert [(o.name, o.allow_insecure_http) for o in registry.registered()] == [("acme", False), ("beta", True)]

    postgres.execute("INSERT INTO commops_orgs VALUES ('gamma', 'http://gamma.example/v1', 'GAMMA_KEY', NULL)",
                     database="orgs_checked")  # plain http, not opted into
    with pytest.raises(SettingsError, match="holds an invalid organization .*opt in with --allow-insecure-http"):
        registry.registered()
    registry.remove("gamma")  # the way out
    assert [o.name for o in registry.registered()] == ["acme", "beta"]
    assert registry.location == f"postgresql://{postgres.host}:{postgres.port}/orgs_checked"  # no user, no password
