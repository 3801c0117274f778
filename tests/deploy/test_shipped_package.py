"""What we ship installs and runs: deploy/Dockerfile copies every package pyproject ships, and the wheel
built from exactly the files it copies, installed (not editable) into a venv of its own, runs the image's
commands and the demo from a directory outside the checkout. (No Docker here: the image's file set and
its commands, without the image.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import setuptools

from commops_cli.daemon_process import REPO, running_process
from http_serving.sockets import free_port
from tests.processes import answers, terminate
from tests.waiting import wait_until

DOCKERFILE = REPO / "deploy" / "Dockerfile"
PROJECT_FILES = {"pyproject.toml", "README.md"}  # what the build reads beside the packages


def dockerfile_sources() -> list[str]:
    """The repo paths deploy/Dockerfile's COPY lines bring into the image."""
    sources = []
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"]:
            sources += [word.rstrip("/") for word in words[1:-1] if not word.startswith("--")]
    return sources


def shipped_packages() -> set[str]:
    """The top-level packages pyproject's [tool.setuptools.packages.find] puts in the wheel."""
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    return {name.split(".")[0] for name in setuptools.find_packages(str(REPO), include=include)}


def test_the_image_copies_every_package_the_wheel_ships_and_the_files_its_build_reads():
    copied = set(dockerfile_sources())
    expected = shipped_packages() | PROJECT_FILES
    assert not expected - copied, f"deploy/Dockerfile copies no {sorted(expected - copied)}"
    assert not copied - expected, f"deploy/Dockerfile copies {sorted(copied - expected)}, which the wheel does not ship"


@pytest.mark.wheel
def test_the_wheel_of_the_image_files_runs_the_image_commands_and_the_demo_outside_the_checkout(tmp_path):
    """Cheap on purpose: the wheel is built with this environment's setuptools (no isolated build env) and
    installed with --no-deps into a venv of its own, which sees this environment's dependencies through a
    .pth file naming their site-packages directory. (A `--system-site-packages` venv would see the base
    interpreter's packages, not this venv's.) A .pth line that is a path adds the directory without running
    the .pth files in it, so the editable install's finder there stays off: the project's packages come
    from the wheel alone, which the test checks before anything else."""
    source = tmp_path / "image"
    source.mkdir()
    for name in dockerfile_sources():
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
          str(source)], cwd=tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    venv_site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          cwd=tmp_path).stdout.strip())
    (venv_site / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # The dependencies' console scripts the code runs, as installing them would have put them in the venv.
    dbt = venv / "bin" / "dbt"
    dbt.write_text(f"#!{python}\nimport sys\nfrom dbt.cli.main import cli\nsys.exit(cli())\n")
    dbt.chmod(0o700)
    (wheel,) = (tmp_path / "dist").glob("commops_sync-*.whl")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
         cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    located = _run([str(python), "-c", "import commops_cli, pipelines; print(commops_cli.__file__, pipelines.__file__)"],
                   cwd=outside).stdout.split()
    assert all(path.startswith(str(venv_site)) for path in located), located

    commops = str(venv / "bin" / "commops")
    port = free_port()
    code_server = [str(python), "-m", "dagster", "api", "grpc", "-m", "pipelines.definitions", "-h", "127.0.0.1",
                   "-p", str(port)]  # the image's CMD
    with running_process(code_server, _clean_env(), tmp_path / "code_server.log", cwd=outside) as server:
        # The demo meanwhile: the package data comes along (the service's schema seeds it, the Dagster
        # instance is the sync's home, the template writes the reconciliation report).
        demo = subprocess.Popen([commops, "demo", "--kols", "20", "--data-dir", str(outside / "data")], cwd=outside,
                                env=_clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert _run([commops, "--version"], cwd=outside).stdout.strip() == "commops, version 0.1.0"
            assert "receiver" in _run([commops, "--help"], cwd=outside).stdout
            assert "--port" in _run([commops, "receiver", "run", "--help"], cwd=outside).stdout

            def listening() -> bool:
                assert server.poll() is None, (tmp_path / "code_server.log").read_text()[-2000:]
                return answers(port)

            wait_until(listening, 120, 0.2, what="the code server to listen (after loading the definitions)")
            _run([str(python), "-m", "dagster", "api", "grpc-health-check", "-h", "127.0.0.1", "-p", str(port)], cwd=outside)
            demo_errors = demo.communicate(timeout=240)[1]
        finally:
            terminate(demo)
    assert demo.returncode == 0, demo_errors[-3000:]
    shipped = (venv_site / "commops_cli" / "dagster.yaml").read_bytes()
    assert (outside / "data" / "dagster_home" / "dagster.yaml").read_bytes() == shipped
    assert list((outside / "data" / "reports" / "reconciliation").glob("*.html"))


def _clean_env() -> dict[str, str]:
    """This environment less the project's settings, Dagster's home and any PYTHONPATH into the checkout."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME", "PYTHONPATH"))}


def _run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command[:4]}: exit {result.returncode}\n{result.stderr[-3000:]}"
    return result
