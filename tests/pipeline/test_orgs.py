"""Many organizations, one asset set: `commops orgs`, `commops sync --all`, isolation,
webhook routing by organization, and a single-organization data directory adopted in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from sync.catalog import CATALOG, KOLS
from assets.snapshot_date import today
from commops_cli.commops import main
from resources.environ import variables_set
from tests.pipeline.sync_support import api_items, query, sync, table_rows
from tests.pipeline.test_api_client_support import add_kols
from tests.receiver.conftest import SECRET, make_receiver, post_signed  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[2]


def commops(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_"))}, **env,
            "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "commops_cli", *args], env=full, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def one_line(result: subprocess.CompletedProcess, code: int = 1) -> str:
    assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# -- commops orgs -----------------------------------------------------------------------------------


def test_orgs_add_list_remove_and_bad_input_get_one_line(tmp_path):
    data = str(tmp_path / "data")
    env = {"ACME_KEY": "k-acme", "BETA_KEY": "k-beta"}
    added = commops("orgs", "add", "acme", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "ACME_KEY",
                    "--organization-id", "org_acme", "--data-dir", data, env=env)
    assert added.returncode == 0, added.stderr
    assert "organization acme added" in added.stdout and "k-acme" not in added.stdout + added.stderr
    assert commops("orgs", "add", "beta", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "BETA_KEY",
                   "--data-dir", data, env=env).returncode == 0

    listed = commops("orgs", "list", "--data-dir", data, env={**env, "COMMOPS_BASE_URL": "http://127.0.0.1:8/v1"})
    assert listed.returncode == 0, listed.stderr
    for text in ("default", "acme", "beta", "ACME_KEY (set)", "org_acme", "environment (COMMOPS_BASE_URL)"):
        assert text in listed.stdout
    assert "k-acme" not in listed.stdout
    registry = (tmp_path / "data" / "orgs.json").read_text()
    assert "ACME_KEY" in registry and "k-acme" not in registry  # a variable's name, never a key

    duplicate = one_line(commops("orgs", "add", "acme", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env",
                                 "ACME_KEY", "--data-dir", data, env=env))
    assert duplicate == "commops orgs add failed: organization 'acme' is already registered (commops orgs remove acme first)"
    unset = one_line(commops("orgs", "add", "gamma", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env",
                             "GAMMA_KEY", "--data-dir", data, env=env))
    assert unset.startswith("commops orgs add failed: GAMMA_KEY is not set: export GAMMA_KEY=")
    bad_name = one_line(commops("orgs", "add", "Gamma Corp", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env",
                                "ACME_KEY", "--data-dir", data, env=env))
    assert "organization name 'Gamma Corp'" in bad_name
    no_version = one_line(commops("orgs", "add", "gamma", "--base-url", "http://127.0.0.1:9", "--api-key-env",
                                  "ACME_KEY", "--data-dir", data, env=env))
    assert "--base-url=http://127.0.0.1:9 lacks the version segment" in no_version
    taken_id = one_line(commops("orgs", "add", "gamma", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env",
                                "ACME_KEY", "--organization-id", "org_acme", "--data-dir", data, env=env))
    assert taken_id.endswith("--organization-id org_acme is already acme's")

    assert commops("orgs", "remove", "beta", "--data-dir", data, env=env).returncode == 0
    gone = one_line(commops("orgs", "remove", "beta", "--data-dir", data, env=env))
    assert gone == "commops orgs remove failed: organization 'beta' is not registered (commops orgs list)"
    unknown = one_line(commops("sync", "--org", "beta", "--data-dir", data, env=env))
    assert "unknown organization 'beta'" in unknown and "known: acme" in unknown


@pytest.mark.parametrize(("name", "organization_id", "refused"), [
    ("nl\n", None, "organization name 'nl\\n'"),
    ("acme", "org_x\n", "--organization-id 'org_x\\n'"),
])
def test_orgs_add_refuses_a_name_or_organization_id_ending_in_a_newline(tmp_path, name, organization_id, refused):
    data = tmp_path / "data"
    extra = ["--organization-id", organization_id] if organization_id else []
    line = one_line(commops("orgs", "add", name, "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "ACME_KEY",
                            *extra, "--data-dir", str(data), env={"ACME_KEY": "k"}))
    assert line.startswith(f"commops orgs add failed: {refused}"), line
    assert not (data / "orgs.json").exists()


def test_a_registry_edited_by_hand_with_a_bad_name_is_refused_as_read_in_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "orgs.json").write_text(json.dumps({"orgs": [
        {"name": "../evil\n", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "ACME_KEY"}]}))
    line = one_line(commops("orgs", "list", "--data-dir", str(data), env={}))
    assert line == (f"commops orgs list failed: {data / 'orgs.json'} holds an invalid organization (organization name "
                    "'../evil\\n': use 1-63 lower-case letters, digits, _ or -, starting with a letter or digit (it "
                    "names a partition and a lake folder)): fix or remove it")


# -- two organizations, two servers ---------------------------------------------------------------


ORG_KOLS = {"acme": 40, "beta": 25}  # each organization's seeded KOLs: tens, so that no count can hide another's rows


def commops_here(*args: str, env: dict[str, str]) -> Result:
    """A quick `commops` command run in this process, for set-up (the commands themselves: the tests above)."""
    clean = {k: None for k in os.environ if k.startswith(("COMMOPS_", "DAGSTER_"))}
    result = CliRunner().invoke(main, list(args), env=clean | env, prog_name="commops")
    assert result.exit_code == 0, result.output
    return result


def register(name: str, base_url: str, organization_id: str, env: dict[str, str]) -> None:
    commops_here("orgs", "add", name, "--base-url", base_url, "--api-key-env", f"{name.upper()}_KEY",
                 "--organization-id", organization_id, env=env)


@pytest.fixture
def two_orgs(make_service, tmp_path):
    """Organizations acme and beta, each on its own service, registered in a fresh data directory."""
    acme = make_service(kols=ORG_KOLS["acme"], campaigns=6, products=5, signals=25, random_seed=1)
    beta = make_service(kols=ORG_KOLS["beta"], campaigns=4, products=3, signals=15, random_seed=2)
    data = tmp_path / "data"
    env = {"ACME_KEY": acme.api_key, "BETA_KEY": beta.api_key, "COMMOPS_DATA_DIR": str(data)}
    for name, service in (("acme", acme), ("beta", beta)):
        register(name, service.base_url, service.org_id, env)
    return {"acme": acme, "beta": beta}, data, env


def assert_org_tables_equal_their_servers(data: Path, services: dict[str, Any], failed: tuple[str, ...] = ()) -> None:
    """Each organization's rows of each table are its server's; organizations whose run `failed` are checked apart."""
    db = data / "analytics.duckdb"
    for spec in CATALOG:
        owners = dict(query(db, f"SELECT id, org FROM {spec.table}"))
        for org, service in services.items():
            items = api_items(service, spec)
            mine = {item_id for item_id, owner in owners.items() if owner == org}
            assert mine == set(items), f"{spec.table} of {org}: {len(set(items) - mine)} missing, {len(mine - set(items))} not its own"
        assert set(owners.values()) <= set(services) | set(failed), f"{spec.table}: rows of no organization"
    assert query(db, "SELECT org, count(*) FROM product_market_status GROUP BY org ORDER BY org")  # children carry org too


def test_sync_all_lands_every_organization_from_its_own_server_and_no_row_crosses(two_orgs):
    services, data, env = two_orgs
    result = commops("sync", "--all", "--max-parallel", "2", "--enrich-limit", "0", env=env)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "acme: landed" in result.stdout and "beta: landed" in result.stdout
    assert_org_tables_equal_their_servers(data, services)
    for org in services:
        assert (data / "lake" / f"org={org}" / "kols").is_dir()
    history = query(data / "analytics.duckdb", "SELECT org, count(*) FROM kols_history GROUP BY org ORDER BY org")
    assert history == sorted(ORG_KOLS.items())
    # the marts, built once after both organizations (not once by each), hold both
    assert result.stdout.count("building the marts once") == 1 and "marts: built and swapped in" in result.stdout
    db = data / "analytics.duckdb"
    assert query(db, "SELECT org, count(*) FROM kol_360 GROUP BY org ORDER BY org") == query(
        db, "SELECT org, count(*) FROM kols GROUP BY org ORDER BY org")


def test_an_organization_whose_key_is_revoked_mid_run_fails_alone_naming_its_key_variable(two_orgs):
    from service import admin

    services, data, env = two_orgs
    from service.server import ServiceServer

    key_id = next(k["id"] for k in admin.list_keys(services["acme"].db_path)
                  if services["acme"].api_key.startswith(k["key_prefix"]))
    revoked: list[str] = []

    class RevokedWhenKolsAreAskedFor(ServiceServer):
        """acme's service, which revokes the run's key as the run first asks for KOLs: the run is paging
        (its other lists under way or done) and every KOL request is answered 401, whatever the machine's speed."""

        def make_app(self):
            app = super().make_app()

            async def revoking(scope, receive, send):
                if scope["type"] == "http" and scope["path"].startswith("/v1/kols") and not revoked:
                    revoked.append(admin.revoke_key(services["acme"].db_path, key_id))
                await app(scope, receive, send)

            return revoking

    services["acme"].server.stop()  # acme's service slowed: its other lists are still paging when its key is revoked
    slow = services["acme"].settings.model_copy(update={"fault_slow_rate": 1.0, "fault_slow_seconds": 0.4})
    server = RevokedWhenKolsAreAskedFor(slow).start()
    try:
        commops_here("orgs", "remove", "acme", env=env)
        register("acme", server.base_url, services["acme"].org_id, env)
        result = commops("sync", "--all", "--max-parallel", "2", "--enrich-limit", "0", "--no-marts", env=env)
        assert revoked == [key_id], "the key was not revoked while acme's run paged"
    finally:
        server.stop()
    assert result.returncode == 1, f"{result.stdout}\n{result.stderr}"
    assert "beta: landed" in result.stdout
    failed = next(line for line in result.stdout.splitlines() if "acme: FAILED" in line)
    assert "API key rejected (401)" in failed and failed.endswith("check ACME_KEY"), failed
    assert services["acme"].api_key not in result.stdout + result.stderr
    db = data / "analytics.duckdb"
    assert query(db, "SELECT DISTINCT org FROM kols") == [("beta",)]  # acme's KOLs, paging when revoked: nothing
    assert_org_tables_equal_their_servers(data, {"beta": services["beta"]}, failed=("acme",))  # beta everything
    # The lists acme finished before were merged beside the next fetch: a table holds all of such a list or none.
    for spec in CATALOG:
        landed = {row_id for (row_id,) in query(db, f"SELECT id FROM {spec.table} WHERE org = 'acme'")}
        if landed:
            snapshot = data / "lake" / "org=acme" / spec.name / f"snapshot_date={today()}" / "data.parquet"
            assert landed == set(pq.read_table(snapshot, columns=["id"]).column("id").to_pylist()), spec.table


def test_webhook_events_land_in_their_organization_and_an_unknown_organizations_are_quarantined(two_orgs, make_receiver):
    from commops_cli.events_apply import run_apply

    services, data, env = two_orgs
    assert commops("sync", "--all", "--enrich-limit", "0", "--no-marts", env=env).returncode == 0
    receiver = make_receiver(data_dir=data)
    created = {org: add_kols(service, 1)[0] for org, service in services.items()}
    events = [{"id": f"wh_evt_{org}", "event": "kol.created", "created_at": "2026-11-22T10:00:00Z",
               "data": {"id": kol_id}, "organization_id": services[org].org_id} for org, kol_id in created.items()]
    stranger = {"id": "wh_evt_stranger", "event": "kol.created", "created_at": "2026-11-22T10:00:00Z",
                "data": {"id": created["acme"]}, "organization_id": "org_nobody"}
    with httpx.Client(timeout=10) as client:
        for event in [*events, stranger]:
            assert post_signed(client, receiver.url, event, SECRET).status_code == 200

    import dagster as dg

    with variables_set(env):
        summary = run_apply(data_dir=str(data), instance=dg.DagsterInstance.ephemeral())
    db = data / "analytics.duckdb"
    for org, kol_id in created.items():
        assert query(db, f"SELECT org FROM kols WHERE id = '{kol_id}'") == [(org,)]
    assert query(db, "SELECT id, org, status FROM webhook_events ORDER BY id") == [
        ("wh_evt_acme", "acme", "applied"), ("wh_evt_beta", "beta", "applied")]
    assert "wh_evt_stranger" in summary.quarantined
    status = commops("events", "status", "--data-dir", str(data), env=env)
    assert "wh_evt_stranger" in status.stdout and "organization org_nobody is not registered" in status.stdout


# -- a data directory from before organizations -----------------------------------------------------


def _as_before_organizations(data: Path) -> None:
    """Rewrite a synced data directory as a sync before this change left it: lake/<resource>/snapshot_date=*,
    tables without the org column keyed by id alone (dated a day earlier, so both snapshots stay)."""
    lake = data / "lake"
    for resource in (lake / "org=default").iterdir():
        for snapshot in resource.iterdir():
            target = lake / resource.name / "snapshot_date=2026-01-01"
            target.parent.mkdir(parents=True, exist_ok=True)
            snapshot.rename(target)
    (lake / "org=default").rename(lake / ".gone")
    conn = duckdb.connect(str(data / "warehouse.duckdb"))
    try:
        for (table,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            conn.execute(f"CREATE TABLE _old AS SELECT * EXCLUDE (org) FROM {table}")
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE _old RENAME TO {table}")
        conn.execute("DROP VIEW IF EXISTS kols_history")
    finally:
        conn.close()


def test_a_single_organization_data_directory_is_adopted_on_the_first_run_and_loses_nothing(make_service, tmp_path):
    service = make_service(kols=120, campaigns=4, products=3, signals=10)
    data = tmp_path / "data"
    sync(service, data)
    _as_before_organizations(data)
    before = {spec.table: set(table_rows(data / "warehouse.duckdb", spec.table)) for spec in CATALOG}
    gone = sorted(before["kols"])[:3]
    conn = service.connect()  # rows the service no longer has (a delete no API offers): the warehouse keeps them
    with conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute(f"DELETE FROM kols WHERE id IN ({', '.join('?' * len(gone))})", gone)
    conn.close()

    summary = sync(service, data)

    assert summary.failed_checks == []
    db = data / "analytics.duckdb"
    for spec in CATALOG:
        rows = query(db, f"SELECT id, org FROM {spec.table}")
        assert {i for i, _ in rows} >= before[spec.table], f"{spec.table}: rows lost in the adoption"
        assert {org for _, org in rows} == {"default"}
    assert set(gone) <= {i for (i,) in query(db, "SELECT id FROM kols")}
    dates = query(db, "SELECT DISTINCT snapshot_date::VARCHAR, org FROM kols_history ORDER BY 1")
    assert dates == [("2026-01-01", "default"), (summary.snapshot_date, "default")]
    assert not (data / "lake" / KOLS.name).exists() and (data / "lake" / "org=default" / KOLS.name).is_dir()
    assert query(db, "SELECT count(*) - count(DISTINCT (org, id)) FROM kols") == [(0,)]  # one row per (org, id)
