"""One test with the real Dagster daemon: the service's webhook → receiver → inbox → the daemon's
sensor tick → a launched apply_webhook_events run → the row in analytics.duckdb."""

from __future__ import annotations

import time
from pathlib import Path

from commops_cli.daemon_process import running_daemon
from tests.pipeline.sync_support import query
from tests.pipeline.webhook_stack import Stack, new_kol, stack  # noqa: F401 (fixture)
from tests.receiver.conftest import wait_until

DEADLINE_SECONDS = 120  # daemon start (code location load) + sensor tick + run launch on 2 shared cores


def _row(analytics: Path, kol_id: str) -> list[tuple]:
    if not analytics.exists():
        return []
    return query(analytics, f"SELECT full_name FROM kols WHERE id = '{kol_id}'")


def test_the_daemon_applies_a_delivered_event_within_the_deadline(stack: Stack, tmp_path: Path) -> None:
    env = {
        "COMMOPS_BASE_URL": stack.service.base_url,
        "COMMOPS_API_KEY": stack.service.api_key,
        "COMMOPS_DATA_DIR": str(stack.data_dir),
    }
    log = tmp_path / "daemon.log"
    with running_daemon(tmp_path / "dagster_home", env, log) as daemon:
        kol = stack.change(lambda conn, org: new_kol(conn, org, "Ivy Daemon"))
        started = time.monotonic()
        try:
            wait_until(lambda: _row(stack.analytics, kol["id"]), timeout=DEADLINE_SECONDS, interval=0.25)
        except AssertionError:
            raise AssertionError(f"not applied within {DEADLINE_SECONDS} s; daemon log:\n{log.read_text()[-3000:]}") from None
        # the applied step runs after the publish the row was seen in: wait for it while the daemon's run lives
        assert wait_until(lambda: stack.inbox.counts()["applied"] == 1, timeout=DEADLINE_SECONDS, interval=0.25)
        assert daemon.poll() is None
    assert _row(stack.analytics, kol["id"]) == [("Ivy Daemon",)]
    print(f"event applied by the daemon {time.monotonic() - started:.1f} s after the change")
