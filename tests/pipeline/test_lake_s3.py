"""The lake on S3 (COMMOPS_LAKE_URL), against a real S3 API server (moto, tests/s3.py): a sync lands the same
tables as with a local lake; a sync killed between uploading a snapshot and committing it leaves no partial
snapshot visible, and the next run removes what it left; leftovers of other hosts wait for their lease."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.snapshot_date import today
from commops_cli.sync_checks import SyncError
from resources.lake import LakeResource
from resources.lake_s3 import MANIFEST, STALE_AFTER, S3Lake
from tests.pipeline.sync_support import query, sync, warehouse_state
from tests.s3 import S3Server, killed_at_request, running_s3

REPO = Path(__file__).resolve().parents[2]
SEED = {"kols": 150, "campaigns": 4, "products": 3, "signals": 12}


@pytest.fixture
def lake_url(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh bucket as this test's lake, the AWS variables set for in-process syncs."""
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    url = f"s3://{s3.create_bucket('lake')}/commops/lake"
    monkeypatch.setenv("COMMOPS_LAKE_URL", url)
    yield url


def _bucket(url: str) -> str:
    return url.removeprefix("s3://").split("/", 1)[0]


def _files(s3: S3Server, url: str) -> list[str]:
    """Object keys under the lake, less the empty "directory" keys pyarrow leaves."""
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    return [key.removeprefix(prefix + "/") for key in s3.keys(bucket, prefix + "/") if not key.endswith("/")]


def _committed_kols(data_dir: Path, url: str) -> int:
    """The KOL snapshot's rows as any reader resolves it: through its manifest."""
    with LakeResource(data_dir=str(data_dir), url=url).local_snapshot("default", "kols", today()) as path:
        return pq.ParquetFile(path).metadata.num_rows


def test_a_sync_with_the_lake_on_s3_lands_the_same_tables_as_with_a_local_lake(make_service, s3, lake_url, tmp_path, monkeypatch):
    service = make_service(**SEED)
    on_s3 = sync(service, tmp_path / "s3")
    monkeypatch.delenv("COMMOPS_LAKE_URL")
    local = sync(service, tmp_path / "local")

    assert warehouse_state(on_s3.analytics_path) == warehouse_state(local.analytics_path)
    assert query(on_s3.analytics_path, "SELECT count(*) FROM kols") == [(SEED["kols"],)]
    files = _files(s3, lake_url)
    for resource in ("kols", "campaigns", "products", "signals"):
        folder = f"org=default/{resource}/snapshot_date={today()}"
        assert f"{folder}/{MANIFEST}" in files
        manifest = json.loads(s3.get(_bucket(lake_url), f"commops/lake/{folder}/{MANIFEST}"))
        assert manifest["files"] == [f"{manifest['run']}/data.parquet"] and f"{folder}/{manifest['files'][0]}" in files
    assert not [f for f in files if f.startswith(".staging/")]  # every publish settled
    assert not (tmp_path / "s3" / "lake" / "org=default").exists()  # nothing of it on local disk
    kols = json.loads(s3.get(_bucket(lake_url), f"commops/lake/org=default/kols/snapshot_date={today()}/{MANIFEST}"))
    lake = S3Lake(lake_url, "COMMOPS_LAKE_URL")
    assert lake.committed_files(("org=default", "kols")) == [
        f"{lake_url}/org=default/kols/snapshot_date={today()}/{kols['run']}/data.parquet"
    ]
    kols_history = lake.history("kols")  # what an analyst queries instead of the local lake's kols_history view
    assert duckdb.sql("SELECT org, snapshot_date, count(*) FROM kols_history GROUP BY ALL").fetchall() == [
        ("default", today(), SEED["kols"])
    ]


def test_a_sync_killed_mid_publish_leaves_no_partial_snapshot_and_the_next_run_cleans_up(make_service, s3, lake_url, tmp_path):
    service = make_service(**SEED)
    data_dir = tmp_path / "data"
    sync(service, data_dir)
    assert _committed_kols(data_dir, lake_url) == SEED["kols"]
    before = set(_files(s3, lake_url))
    httpx.post(f"{service.base_url}/kols", headers={"Authorization": f"Bearer {service.api_key}"}, timeout=30,
               json={"full_name": "Dr. Ada Killed", "specialties": ["cardiology"]}).raise_for_status()

    # A real `commops sync` whose requests pass through a proxy that never forwards the KOL manifest's write:
    # the new snapshot is uploaded, the commit is under way, and the process is killed right then.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMOPS_", "DAGSTER_HOME"))}
    env |= {"COMMOPS_LAKE_URL": lake_url, "COMMOPS_BASE_URL": service.base_url, "COMMOPS_API_KEY": service.api_key}
    killed_at_request(s3, r"(PUT|POST) \S*/kols/snapshot_date(=|%3D)\S*/_manifest\.json",
                      [sys.executable, "-m", "commops_cli", "sync", "--data-dir", str(data_dir), "--no-progress",
                       "--no-marts", "--enrich-limit", "0"],
                      env, tmp_path / "killed-sync.log", "the KOL manifest's write", cwd=REPO)

    left = set(_files(s3, lake_url)) - before
    uploaded = [f for f in left if f.startswith(f"org=default/kols/snapshot_date={today()}/run-")]
    assert len(uploaded) == 1 and uploaded[0].endswith("/data.parquet")  # the new snapshot was fully uploaded ...
    assert any(f.startswith(".staging/") for f in left)  # ... and marked as possibly abandoned
    assert _committed_kols(data_dir, lake_url) == SEED["kols"]  # readers still get the complete previous snapshot
    assert all(not f.startswith("org=default/kols/") or f in before or f == uploaded[0] for f in left)

    sync(service, data_dir)  # the next run, on the same host: the killed writer's pid is dead

    files = _files(s3, lake_url)
    assert uploaded[0] not in files and not [f for f in files if f.startswith(".staging/")]
    assert len([f for f in files if f.startswith(f"org=default/kols/snapshot_date={today()}/run-")]) == 1
    assert _committed_kols(data_dir, lake_url) == SEED["kols"] + 1
    assert query(data_dir / "analytics.duckdb", "SELECT count(*) FROM kols") == [(SEED["kols"] + 1,)]


def test_a_leftover_of_another_host_is_kept_until_its_lease_expires(s3, lake_url, tmp_path):
    lake = S3Lake(lake_url, "COMMOPS_LAKE_URL")
    bucket, prefix = lake_url.removeprefix("s3://").split("/", 1)
    staged = tmp_path / "data.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"]}), staged)
    lake.publish(staged, "org=a/kols/snapshot_date=2026-01-01", rows=3)

    def leave(run: str, age: timedelta) -> None:  # what a writer on another host killed after its upload leaves
        folder = "org=a/kols/snapshot_date=2026-01-01"
        httpx.put(f"{s3.endpoint_url}/{bucket}/{prefix}/{folder}/{run}/data.parquet", content=staged.read_bytes()).raise_for_status()
        marker = {"snapshot": folder, "run": run, "host": "another-host", "pid": os.getpid(),
                  "written_at": (datetime.now(UTC) - age).isoformat()}
        httpx.put(f"{s3.endpoint_url}/{bucket}/{prefix}/.staging/{run}.json", json=marker).raise_for_status()

    leave("run-fresh", timedelta(minutes=5))
    leave("run-stale", STALE_AFTER + timedelta(minutes=1))
    assert lake.remove_abandoned() == ["org=a/kols/snapshot_date=2026-01-01/run-stale"]
    files = _files(s3, lake_url)
    assert "org=a/kols/snapshot_date=2026-01-01/run-fresh/data.parquet" in files  # maybe still writing
    assert ".staging/run-fresh.json" in files
    assert not [f for f in files if "run-stale" in f]
    assert len(lake.committed_files()) == 1


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("s3:/lake", r"COMMOPS_LAKE_URL='s3:/lake' is not an s3://bucket/prefix URL"),
        ("s3://key:secret@lake/x", r"COMMOPS_LAKE_URL must not hold credentials: set AWS_ACCESS_KEY_ID"),
        ("s3://no-such-bucket/lake", r"COMMOPS_LAKE_URL=s3://no-such-bucket/lake: bucket 'no-such-bucket' not found at http://"),
    ],
)
def test_a_bad_lake_url_stops_the_sync_with_one_line_naming_the_cause(make_service, s3, lake_url, tmp_path, monkeypatch, url, cause):
    monkeypatch.setenv("COMMOPS_LAKE_URL", url)
    with pytest.raises(SyncError, match=f"^{cause}") as failed:
        sync(make_service(kols=1), tmp_path / "data")
    assert "\n" not in str(failed.value) and "secret" not in str(failed.value)


def test_rejected_credentials_stop_the_sync_with_one_line_naming_the_aws_variables(make_service, tmp_path, monkeypatch):
    with running_s3({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as checking:  # moto checks credentials: ours are unknown
        for name, value in checking.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("COMMOPS_LAKE_URL", "s3://lake/commops")
        with pytest.raises(SyncError, match=r"^COMMOPS_LAKE_URL=s3://lake/commops: access denied, check AWS_ACCESS_KEY_ID") as failed:
            sync(make_service(kols=1), tmp_path / "data")
    assert "\n" not in str(failed.value) and "testing-secret" not in str(failed.value)
