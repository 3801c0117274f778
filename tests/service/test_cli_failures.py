"""`commops service ...` as a user runs it (a subprocess): the default database is the demo's,
missing or unopenable databases and taken ports fail with one line, and demo-key."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def commops(*args: str, data_dir: Path, cwd: Path, timeout: float = 60,
            env_overrides: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMMOPS_")}
    env.update(PYTHONPATH=str(ROOT), COMMOPS_DATA_DIR=str(data_dir), **(env_overrides or {}))
    return subprocess.run([sys.executable, "-m", "commops_cli", "service", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def assert_one_line_failure(result: subprocess.CompletedProcess[str], command: str, *fragments: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Serving" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"commops service {command} failed: ")
    for fragment in fragments:
        assert fragment in line


@pytest.mark.parametrize(
    "args",
    [("list-keys",), ("revoke-key", "key_x"), ("create-key", "--org", "org_x", "--scopes", "all"),
     ("seed", "--org", "org_x")],
    ids=lambda args: args[0],
)
def test_admin_commands_refuse_a_missing_database_instead_of_creating_one(tmp_path, args):
    result = commops(*args, data_dir=tmp_path / "data", cwd=tmp_path)
    assert_one_line_failure(result, args[0], "no service database at", "service.db", "commops demo")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("args", [("run", "--port", "0"), ("create-org", "Acme", "--plan", "starter")],
                         ids=lambda args: args[0])
def test_a_database_in_a_directory_that_does_not_exist_is_refused_not_created(tmp_path, args):
    missing = tmp_path / "nonexistent" / "x.db"
    result = commops(args[0], "--db", str(missing), *args[1:], data_dir=tmp_path / "data", cwd=tmp_path)
    assert_one_line_failure(result, args[0], f"no directory {missing.parent} for the database {missing}")
    assert not missing.parent.exists()


def test_commands_default_to_the_demo_database_under_commops_data_dir(tmp_path):
    data_dir = tmp_path / "data"
    created = commops("create-org", "Acme", "--plan", "starter", data_dir=data_dir, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    org_id = created.stdout.strip().splitlines()[-1]
    assert (data_dir / "service" / "service.db").is_file()
    key = commops("create-key", "--org", org_id, "--scopes", "all", data_dir=data_dir, cwd=tmp_path)
    listing = commops("list-keys", data_dir=data_dir, cwd=tmp_path)
    assert listing.returncode == 0 and key.stdout.strip()[:10] in listing.stdout


def test_run_on_a_file_that_is_not_a_database_fails_before_serving(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("not sqlite at all " * 100)
    result = commops("run", "--db", str(bad), "--port", "0", data_dir=tmp_path, cwd=tmp_path)
    assert_one_line_failure(result, "run", f"cannot open database {bad}: ")


def test_run_on_a_port_in_use_fails_with_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = commops("run", "--db", str(tmp_path / "ok.db"), "--port", str(port), data_dir=tmp_path, cwd=tmp_path)
    assert_one_line_failure(result, "run", f"port {port} on 127.0.0.1 is in use")


def test_demo_key_prints_the_demo_organizations_key(tmp_path):
    folder = tmp_path / "data" / "service"
    folder.mkdir(parents=True)
    (folder / "demo-credentials.json").write_text(json.dumps({"org_id": "org_demo", "api_key": "ck_live_demo123"}))
    result = commops("demo-key", data_dir=tmp_path / "data", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "ck_live_demo123\n"


def test_demo_key_without_a_demo_says_to_run_it(tmp_path):
    result = commops("demo-key", data_dir=tmp_path / "data", cwd=tmp_path)
    credentials = tmp_path / "data" / "service" / "demo-credentials.json"
    assert_one_line_failure(result, "demo-key", f"no demo credentials at {credentials}: run `commops demo` first")


def test_run_refuses_a_trusted_proxy_that_is_not_an_address(tmp_path):
    result = commops("run", "--port", "0", data_dir=tmp_path / "data", cwd=tmp_path,
                     env_overrides={"COMMOPS_SERVICE_FORWARDED_ALLOW_IPS": "10.0.0.5,proxy.internal"})
    assert_one_line_failure(result, "run", "COMMOPS_SERVICE_FORWARDED_ALLOW_IPS: 'proxy.internal' is not an IP address")
