"""Analysts hold analytics.duckdb open in their own process while syncs run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resources.lake import SNAPSHOT_FILE, LakeResource
from tests.pipeline.sync_support import sync
from tests.pipeline.test_api_client_support import add_kols

ANALYST = Path(__file__).with_name("analyst_process.py")


def test_an_analyst_holding_analytics_open_never_breaks_a_sync_and_sees_new_data_after_reconnecting(make_service, tmp_path):
    service = make_service(kols=150, campaigns=10, products=10, signals=50)
    data_dir = tmp_path / "data"
    first = sync(service, data_dir, marts=True)
    kols_before = first.asset("warehouse/kols").rows
    stop = tmp_path / "stop"
    analyst = subprocess.Popen(
        [sys.executable, str(ANALYST), str(data_dir / "analytics.duckdb"), str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert analyst.stdout.readline().strip() == "ready"
        add_kols(service, 7)
        second = sync(service, data_dir, marts=True)
        add_kols(service, 3)
        third = sync(service, data_dir, marts=True)
    finally:
        stop.touch()
        out, err = analyst.communicate(timeout=60)
    report = json.loads(out.strip().splitlines()[-1])

    assert analyst.returncode == 0, err
    assert report["errors"] == [] and report["queries"] > 0
    assert report["held_count"] == report["still_held"] == kols_before  # the held connection kept its snapshot
    assert report["after_reconnect"] == kols_before + 10  # reconnecting shows the third sync's data
    assert second.failed_checks == [] and third.failed_checks == []
    assert third.asset("warehouse/kols").rows == kols_before + 10


def test_a_rerun_of_a_date_replaces_its_snapshot_with_no_moment_when_the_history_view_finds_none(tmp_path, monkeypatch):
    # The history views glob the lake at query time: a re-run of today must never leave today without a file
    # (DuckDB: "No files found that match the pattern"), and an analyst mid-read keeps reading the old one.
    lake, day = LakeResource(data_dir=str(tmp_path)), "2026-11-24"

    def staged(ids: list[str]) -> Path:
        staging = lake.new_staging_dir("acme", "kols", day)
        pq.write_table(pa.table({"id": ids}), staging / SNAPSHOT_FILE)
        return staging

    final = lake.publish(staged(["kol_a"]), "acme", "kols", day)
    files_after_each_rename: list[int] = []

    def counting(rename):
        def call(*args, **kwargs):
            rename(*args, **kwargs)
            files_after_each_rename.append(len(list(tmp_path.glob(lake.relative_glob("kols")))))
        return call

    monkeypatch.setattr(os, "rename", counting(os.rename))
    monkeypatch.setattr(os, "replace", counting(os.replace))
    with open(final / SNAPSHOT_FILE, "rb") as held:  # an analyst's query mid-read
        lake.publish(staged(["kol_b", "kol_c"]), "acme", "kols", day)
        assert pq.read_table(held).column("id").to_pylist() == ["kol_a"]

    assert files_after_each_rename and set(files_after_each_rename) == {1}
    assert pq.read_table(final / SNAPSHOT_FILE).column("id").to_pylist() == ["kol_b", "kol_c"]
    assert not list((lake.root / ".staging").iterdir())  # nothing left behind
