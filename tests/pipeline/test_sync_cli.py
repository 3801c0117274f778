"""`commops sync` from the shell: a summary on success, one clear line and a non-zero exit on failure."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _commops_sync(tmp_path, env_overrides, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-m", "commops_cli", "sync", "--data-dir", str(tmp_path / "data"), *args],
        env=env, capture_output=True, text=True, timeout=120,
    )


def test_sync_without_base_url_names_the_missing_variable(tmp_path):
    result = _commops_sync(tmp_path, {"COMMOPS_API_KEY": "anything"})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "commops sync failed: COMMOPS_BASE_URL is not set: export COMMOPS_BASE_URL=... (see README)"
    ]


def test_sync_without_api_key_names_the_missing_variable(tmp_path):
    result = _commops_sync(tmp_path, {"COMMOPS_BASE_URL": "http://127.0.0.1:9/v1"})
    assert result.returncode == 1
    assert "COMMOPS_API_KEY is not set" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("variable", ["COMMOPS_API_KEY", "ANALYTICS_COMMOPS_KEY"])
def test_sync_with_a_rejected_key_says_so_in_one_line_naming_the_variable_it_came_from(make_service, tmp_path,
                                                                                       variable):
    service = make_service(kols=3)
    option = [] if variable == "COMMOPS_API_KEY" else ["--api-key-env", variable]
    result = _commops_sync(tmp_path, {"COMMOPS_BASE_URL": service.base_url, variable: "ck_wrong_key"}, *option)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "API key rejected (401)" in lines[0] and lines[0].endswith(f"check {variable}"), result.stderr
    assert "ck_wrong_key" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_sync_with_a_key_lacking_a_scope_names_the_scope(make_service, tmp_path):
    service = make_service(kols=3, products=2)
    key = service.create_key(["kols:read", "campaigns:read", "signals:read"])
    result = _commops_sync(tmp_path, {"COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": key})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "403" in lines[0] and "products:read" in lines[0], result.stderr


def test_sync_prints_a_summary_and_where_to_query(make_service, tmp_path):
    service = make_service(kols=120, campaigns=3, products=4, signals=5)
    result = _commops_sync(tmp_path, {"COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": service.api_key},
                           "--enrich-limit", "10")
    assert result.returncode == 0, result.stderr
    for text in ("lake/kols", "warehouse/kols", "warehouse/kol_details", "requests", "429s", "analytics.duckdb"):
        assert text in result.stdout
    assert "pending for next runs" in result.stdout  # 10 details fetched, the rest left for later
    assert "marts/staging" not in result.stdout  # dbt's models are one line, not a row each of dashes
    assert "dbt models built and swapped in" in result.stdout


def test_sync_with_no_marts_lands_the_tables_and_leaves_the_marts_to_one_build_later(make_service, tmp_path):
    from tests.pipeline.sync_support import query

    service = make_service(kols=30, campaigns=2, products=2, signals=2)
    env = {"COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": service.api_key}
    result = _commops_sync(tmp_path, env, "--no-marts", "--enrich-limit", "0", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "Marts: not built (--no-marts); build them with: commops marts build" in result.stdout
    analytics = tmp_path / "data" / "analytics.duckdb"
    tables = {name for (name,) in query(analytics, "SELECT table_name FROM information_schema.tables")}
    assert "kols" in tables and "kol_360" not in tables

    build = subprocess.run([sys.executable, "-m", "commops_cli", "marts", "build", "--data-dir", str(tmp_path / "data")],
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    assert query(analytics, "SELECT count(*) FROM kol_360") == query(analytics, "SELECT count(*) FROM kols") == [(30,)]


def test_the_progress_display_shows_pages_per_walk_and_details(make_service, tmp_path):
    import io

    from rich.console import Console

    from commops_cli.progress_display import RichProgress
    from tests.pipeline.sync_support import sync

    service = make_service(kols=250, campaigns=2, products=2, signals=2)
    output = io.StringIO()
    with RichProgress(Console(file=output, force_terminal=True, width=120)) as display:
        sync(service, tmp_path / "data", progress=display, enrich_details_limit=5)
    text = output.getvalue()
    for label in ("kols is_archived=false", "kols is_archived=true", "campaigns", "signals", "kol details", "pages"):
        assert label in text
