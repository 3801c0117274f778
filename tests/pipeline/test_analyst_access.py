"""Analysts hold analytics.duckdb open in their own process while syncs run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.pipeline.sync_support import sync
from tests.pipeline.test_api_client_support import add_kols

ANALYST = Path(__file__).with_name("analyst_process.py")


def test_an_analyst_holding_analytics_open_never_breaks_a_sync_and_sees_new_data_after_reconnecting(make_service, tmp_path):
    service = make_service(kols=150, campaigns=10, products=10, signals=50)
    data_dir = tmp_path / "data"
    first = sync(service, data_dir)
    kols_before = first.asset("warehouse/kols").rows
    stop = tmp_path / "stop"
    analyst = subprocess.Popen(
        [sys.executable, str(ANALYST), str(data_dir / "analytics.duckdb"), str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert analyst.stdout.readline().strip() == "ready"
        add_kols(service, 7)
        second = sync(service, data_dir)
        add_kols(service, 3)
        third = sync(service, data_dir)
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
