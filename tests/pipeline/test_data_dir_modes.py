"""Who may read the data directory: its owner only, whatever umask `commops` is started with; analysts
through the group COMMOPS_DATA_GROUP names (the lake, analytics.duckdb), never the secrets and never
other users; a directory written earlier with wider modes is tightened on first use, in one line."""

from __future__ import annotations

import grp
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.file_modes import loose_umask, mode, reachable_by_others, tree

ROOT = Path(__file__).resolve().parents[2]
WORLD = stat.S_IRWXO


def _commops(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`commops ARGS` under a loose umask (0022), with only the given COMMOPS_* variables."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    environment.update(env, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "commops_cli", *args], env=environment, capture_output=True,
                            text=True, timeout=180, preexec_fn=loose_umask)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _sync_with_secrets(service, data_dir: Path, **env: str) -> None:
    """What a data directory holds after a night: an organization registered, the local service's
    database, a sync (lake, warehouse, analytics.duckdb, Dagster's home)."""
    env = {"COMMOPS_DATA_DIR": str(data_dir), **env}
    _commops("orgs", "add", "emea", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "EMEA_KEY",
             "--allow-unset-key", **env)
    _commops("service", "create-org", "Modes Medical", "--plan", "starter", **env)
    _commops("sync", "--org", "default", "--enrich-limit", "2", COMMOPS_BASE_URL=service.base_url,
             COMMOPS_API_KEY=service.api_key, **env)
    for written in ("orgs.json", "service/service.db", "warehouse.duckdb", "analytics.duckdb", "dagster_home", "lake"):
        assert (data_dir / written).exists(), written


def test_a_sync_under_a_loose_umask_leaves_nothing_a_group_or_other_users_can_read(make_service, tmp_path):
    data_dir = tmp_path / "data"
    _sync_with_secrets(make_service(kols=6, campaigns=1, products=1, signals=1), data_dir)
    assert reachable_by_others(data_dir) == []


def test_with_a_data_group_it_reads_the_lake_and_analytics_but_no_secret_and_others_read_nothing(make_service,
                                                                                                 tmp_path):
    data_dir, gid = tmp_path / "data", os.getgid()
    _sync_with_secrets(make_service(kols=6, campaigns=1, products=1, signals=1), data_dir,
                       COMMOPS_DATA_GROUP=grp.getgrgid(gid).gr_name)

    assert reachable_by_others(data_dir, WORLD) == []
    info = data_dir.stat()
    assert info.st_gid == gid and mode(data_dir) == 0o2750  # setgid: what is created in it gets the group
    shared = [data_dir / "analytics.duckdb", *tree(data_dir / "lake")]
    assert [path for path in shared if path.stat().st_gid != gid or not mode(path) & stat.S_IRGRP] == []
    assert [path for path in shared if path.is_dir() and not mode(path) & stat.S_IXGRP] == []
    # owner-only: the secret files, and the secret folders (what they hold is out of reach whatever its mode)
    secrets = ("orgs.json", "service", "service/service.db", "dagster_home")
    assert [f"{mode(data_dir / name):04o} {name}" for name in secrets if mode(data_dir / name) & 0o077] == []


def _written_by_an_earlier_version(data_dir: Path) -> dict[str, Path]:
    """A data directory as an earlier version left it under umask 0022: folders 0755, files 0644."""
    snapshot = data_dir / "lake" / "org=default" / "kols" / "snapshot_date=2026-05-01" / "data.parquet"
    paths = {"analytics": data_dir / "analytics.duckdb", "snapshot": snapshot,
             "database": data_dir / "service" / "service.db", "unknown": data_dir / "notes.txt"}
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    for path in tree(data_dir):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return paths


def test_an_existing_data_dir_readable_by_others_is_tightened_on_first_use_saying_so_in_one_line(tmp_path):
    data_dir = tmp_path / "data"
    paths = _written_by_an_earlier_version(data_dir)

    first = _commops("orgs", "list", "--data-dir", str(data_dir), COMMOPS_BASE_URL="http://127.0.0.1:9/v1")
    # the directory, analytics.duckdb, lake/ and its 4 levels, service/ and its database
    assert first.stderr.splitlines() == [
        f"commops: tightened permissions on 9 paths under {data_dir} (other users could read them): owner-only now"]
    assert reachable_by_others(data_dir) == [f"0644 {paths['unknown']}"]  # what commops does not write: left alone
    second = _commops("orgs", "list", "--data-dir", str(data_dir), COMMOPS_BASE_URL="http://127.0.0.1:9/v1")
    assert second.stderr == ""


def test_with_a_data_group_an_existing_data_dir_keeps_its_secrets_owner_only_and_shares_the_rest(tmp_path):
    data_dir, gid = tmp_path / "data", os.getgid()
    paths = _written_by_an_earlier_version(data_dir)
    group = grp.getgrgid(gid).gr_name

    result = _commops("orgs", "list", "--data-dir", str(data_dir), COMMOPS_BASE_URL="http://127.0.0.1:9/v1",
                      COMMOPS_DATA_GROUP=group)
    assert result.stderr.splitlines() == [
        f"commops: set permissions on 9 paths under {data_dir}: readable by the group {group}, secrets owner-only, "
        "nothing for other users"]
    assert (mode(data_dir), mode(paths["analytics"]), mode(paths["snapshot"])) == (0o2750, 0o640, 0o640)
    assert (mode(paths["database"].parent), mode(paths["database"])) == (0o700, 0o600)


def test_an_unknown_data_group_is_one_line_naming_the_setting(tmp_path):
    result = subprocess.run([sys.executable, "-m", "commops_cli", "orgs", "list", "--data-dir", str(tmp_path)],
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COMMOPS_DATA_GROUP": "no-such-group-here"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "commops orgs list failed: COMMOPS_DATA_GROUP='no-such-group-here' is not a group on this host"]


@pytest.mark.parametrize("group", [None, "primary"])
def test_the_code_location_gives_the_data_dir_its_modes_when_it_loads(tmp_path, monkeypatch, group):
    """Dagster's processes (the code server, each run worker) load the code location: that is where they
    get the umask, and an earlier data directory its modes."""
    from pipelines.definitions import defs

    data_dir = tmp_path / "data"
    paths = _written_by_an_earlier_version(data_dir)
    monkeypatch.setenv("COMMOPS_DATA_DIR", str(data_dir))
    if group:
        monkeypatch.setenv("COMMOPS_DATA_GROUP", grp.getgrgid(os.getgid()).gr_name)
    else:
        monkeypatch.delenv("COMMOPS_DATA_GROUP", raising=False)
    os.umask(0o022)
    defs()
    assert os.umask(0o022) == (0o027 if group else 0o077)
    assert mode(paths["analytics"]) == (0o640 if group else 0o600)
    assert mode(paths["database"]) == 0o600
