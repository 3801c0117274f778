"""`commops service` admin commands, scripted as a user would, against a real server."""

from __future__ import annotations

import httpx
from click.testing import CliRunner

from commops_cli.commops import main
from service.server import ServiceServer
from service.settings import ServiceSettings
from tests.service.conftest import bearer


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


def invoke(*args: str, env: dict | None = None) -> str:
    result = CliRunner().invoke(main, ["service", *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_create_org_and_key_print_them_alone_on_the_last_line_and_the_key_works(tmp_path):
    db = str(tmp_path / "cli.db")
    org_id = last_line(invoke("create-org", "Acme CLI", "--plan", "professional", "--db", db))
    assert org_id.startswith("org_") and " " not in org_id
    key = last_line(invoke("create-key", "--org", org_id, "--scopes", "kols:read,kols:write", "--db", db))
    with ServiceServer(ServiceSettings(db=db)) as server:
        response = httpx.get(f"{server.base_url}/kols", headers=bearer(key))
        assert response.status_code == 200 and response.headers["x-ratelimit-limit"] == "300"
        assert httpx.get(f"{server.base_url}/signals", headers=bearer(key)).status_code == 403

        listing = invoke("list-keys", "--db", db)
        assert key not in listing and key[:10] in listing and "kols:read,kols:write" in listing
        key_id = listing.split()[0]
        assert last_line(invoke("revoke-key", key_id, "--db", db)) == key_id
        assert httpx.get(f"{server.base_url}/kols", headers=bearer(key)).status_code == 401
        assert "revoked" in invoke("list-keys", "--db", db)


def test_scopes_all_grants_every_scope_and_db_defaults_to_the_environment(tmp_path):
    db = str(tmp_path / "env.db")
    env = {"COMMOPS_SERVICE_DB": db}
    org_id = last_line(invoke("create-org", "Env Co", "--plan", "starter", env=env))
    key = last_line(invoke("create-key", "--org", org_id, "--scopes", "all", env=env))
    with ServiceServer(ServiceSettings(db=db)) as server:
        for path in ("/kols", "/campaigns", "/products", "/signals"):
            assert httpx.get(server.base_url + path, headers=bearer(key)).status_code == 200


def test_unknown_scope_or_org_is_a_clear_error(tmp_path):
    db = str(tmp_path / "err.db")
    org_id = last_line(invoke("create-org", "Err Co", "--plan", "starter", "--db", db))
    runner = CliRunner()
    bad_scope = runner.invoke(main, ["service", "create-key", "--org", org_id, "--scopes", "kols:delete", "--db", db])
    assert bad_scope.exit_code != 0 and "kols:delete" in bad_scope.output
    bad_org = runner.invoke(main, ["service", "create-key", "--org", "org_nope", "--scopes", "all", "--db", db])
    assert bad_org.exit_code != 0 and "org_nope" in bad_org.output
