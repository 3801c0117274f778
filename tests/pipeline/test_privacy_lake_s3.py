"""Erasure and retention on the lake on S3 (COMMOPS_LAKE_URL), against moto's S3 server: one person planted in
every personal field is in two nights' KOL snapshots; `commops privacy locate` names both, an erasure killed
as it commits a rewritten snapshot and run again leaves no marker in any object of the bucket, the other KOLs
kept with the file's schema; retention removes the old nights' objects, never the newest eight."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from assets.snapshot_date import today
from commops_cli.commops import main
from privacy.object_stores import S3LakeStore
from privacy.retention import apply_retention
from privacy.suppression import PRIVACY_KEY_ENV
from resources.lake import LakeResource
from resources.lake_s3 import S3Lake
from tests.pipeline.object_store_scan import s3_hits
from tests.pipeline.test_lake_s3 import _bucket, _files, lake_url  # noqa: F401 (fixture)
from tests.pipeline.test_privacy_erase import NEEDLES, _cli, _hits, planted_and_synced
from tests.s3 import killed_at_request

REPO = Path(__file__).resolve().parents[2]
EARLIER = "2026-01-01"


def _kols(data_dir: Path, url: str, snapshot_date: str) -> pa.Table:
    with LakeResource(data_dir=str(data_dir), url=url).local_snapshot("default", "kols", snapshot_date) as path:
        return pq.read_table(path)


def _erase_killed_at_commit(s3, url: str, data_dir: Path, kol_id: str, tmp_path: Path) -> None:
    """The erasure in a process of its own, killed (SIGKILL) as it writes a manifest: the rewritten snapshot is
    uploaded, its commit under way."""
    script = ("import sys\nfrom pathlib import Path\nfrom privacy import erase as e\n"
              "data = Path(sys.argv[1])\ne.erase(data, e.resolve(data, kol_id=sys.argv[2]))\n")
    killed_at_request(s3, r"(PUT|POST) \S*/snapshot_date(=|%3D)\S*/_manifest\.json",
                      [sys.executable, "-c", script, str(data_dir), kol_id],
                      os.environ | {"COMMOPS_LAKE_URL": url, "PYTHONPATH": str(REPO)},
                      tmp_path / "killed-erase.log", "a manifest's write", cwd=REPO)


def test_erase_on_the_s3_lake_rewrites_the_snapshots_holding_the_person_even_killed_at_a_commit(
        make_service, s3, lake_url, tmp_path, monkeypatch):
    service, kol_id, data_dir = planted_and_synced(make_service, tmp_path, monkeypatch)
    with LakeResource(data_dir=str(data_dir), url=lake_url).local_snapshot("default", "kols", today()) as path:
        rows = pq.ParquetFile(path).metadata.num_rows  # an earlier night's snapshot: the same person
        S3Lake(lake_url, "COMMOPS_LAKE_URL").publish(path, f"org=default/kols/snapshot_date={EARLIER}", rows)
    schema = _kols(data_dir, lake_url, today()).schema
    bucket = _bucket(lake_url)
    assert {h.split("/run-")[0] for h in s3_hits(s3, bucket, NEEDLES)} >= {
        f"commops/lake/org=default/kols/snapshot_date={d}" for d in (EARLIER, today())}

    located = _cli("privacy", "locate", "--kol", kol_id, "--data-dir", str(data_dir))
    for folder in (f"kols/snapshot_date={EARLIER}", f"kols/snapshot_date={today()}"):
        assert f"lake-s3        1 row(s) hold the person  {lake_url}/org=default/{folder}" in located, located
    dry = _cli("privacy", "erase", "--kol", kol_id, "--dry-run", "--data-dir", str(data_dir))
    assert f"{lake_url}/org=default/kols/snapshot_date={EARLIER}" in dry and s3_hits(s3, bucket, NEEDLES)

    _erase_killed_at_commit(s3, lake_url, data_dir, kol_id, tmp_path)
    assert s3_hits(s3, bucket, NEEDLES)  # the commit never happened: the person is still in a committed snapshot
    assert any(f.startswith(".staging/") for f in _files(s3, lake_url))

    output = _cli("privacy", "erase", "--kol", kol_id, "--data-dir", str(data_dir))
    assert f"lake-s3        1 row(s) erased  {lake_url}/org=default/kols/snapshot_date={EARLIER}" in output, output
    assert s3_hits(s3, bucket, NEEDLES) == [] and _hits(data_dir) == []
    assert not [f for f in _files(s3, lake_url) if f.startswith(".staging/")]  # what the killed run left: swept
    for snapshot_date in (EARLIER, today()):  # the other KOLs kept, with the file's schema
        kept = _kols(data_dir, lake_url, snapshot_date)
        assert kept.num_rows == 10 and kept.schema == schema and kol_id not in kept.column("id").to_pylist()
    assert "Nothing left to erase" in _cli("privacy", "erase", "--kol", kol_id, "--data-dir", str(data_dir))


def test_retention_removes_the_s3_lakes_old_nights_never_the_newest_eight(s3, lake_url, tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    lake = S3Lake(lake_url, "COMMOPS_LAKE_URL")
    staged = tmp_path / "data.parquet"
    pq.write_table(pa.table({"id": ["kol_a", "kol_b"], "full_name": ["Dr A", "Dr B"]}), staged)
    now = datetime.now(UTC).date()
    days = [now - timedelta(days=n) for n in range(12)]
    for day in days:
        lake.publish(staged, f"org=default/kols/snapshot_date={day}", 2)
    lake.publish(staged, f"org=default/products/snapshot_date={days[-1]}", 2)  # a resource's only night: kept

    removed = apply_retention(data_dir, now, days=7)
    assert sorted(removed.snapshots) == sorted(f"{lake_url}/org=default/kols/snapshot_date={d}" for d in days[8:])
    left = {f.split("/run-")[0] for f in _files(s3, lake_url)}
    assert left == {f"org=default/kols/snapshot_date={d}" for d in days[:8]} | {
        f"org=default/kols/snapshot_date={d}/_manifest.json" for d in days[:8]} | {
        f"org=default/products/snapshot_date={days[-1]}", f"org=default/products/snapshot_date={days[-1]}/_manifest.json"}
    assert apply_retention(data_dir, now, days=7).snapshots == []
    kols = [f for f in S3LakeStore(data_dir, lake_url).snapshots() if "/kols/" in f]
    assert [folder.rsplit("=", 1)[1] for folder in kols] == sorted(str(d) for d in days[:8])  # readers see the eight


def test_a_missing_bucket_stops_locate_and_erase_with_one_line_naming_the_setting(s3, tmp_path, monkeypatch):
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COMMOPS_LAKE_URL", "s3://no-such-bucket/lake")
    monkeypatch.setenv(PRIVACY_KEY_ENV, "test-privacy-key-not-a-secret")
    for verb in ("locate", "erase"):
        result = CliRunner().invoke(main, ["privacy", verb, "--kol", "kol_x", "--data-dir", str(tmp_path / "data")])
        assert result.exit_code != 0, result.output
        assert "COMMOPS_LAKE_URL=s3://no-such-bucket/lake: bucket 'no-such-bucket' not found" in result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
