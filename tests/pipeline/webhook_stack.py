"""The whole webhook path for tests: a real service delivering webhooks (delivery worker on, loopback
allowed, retries shrunk) to a real receiver writing a real inbox; the sensor evaluated with
Dagster's test context and its run requests executed in-process against analytics.duckdb."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from commops_spec.constants import EVENTS
from webhooks.subscriptions import Subscriptions
from pipelines.definitions import build_resources, make_definitions
from pipelines.jobs import APPLY_WEBHOOK_EVENTS
from assets.partitions import ORGS
from pipelines.sensors import webhook_events_sensor
from resources.orgs import DEFAULT_ORG
from resources.orgs_resource import OrgsResource
from resources.webhooks import InboxResource
from resources.settings import load_settings
from tests.pipeline.sync_support import api_key_in_env, query, with_orgs
from tests.receiver.conftest import wait_until
from tests.service.webhook_support import free_port
from resources.inbox import Inbox
from webhooks.receiver.server import ReceiverServer
from webhooks.receiver.settings import ReceiverSettings

WEBHOOK_SETTINGS = {
    "webhook_time_scale": 0.00002,  # retries 1.2 ms ... 1.7 s
    "webhook_attempt_timeout_seconds": 2.0,
    "webhook_allow_private": True,  # the receiver listens on loopback
}


@dataclass
class Stack:
    service: Any  # tests.pipeline.conftest.RunningService
    receiver: ReceiverServer
    data_dir: Path
    instance: dg.DagsterInstance
    defs: dg.Definitions

    @property
    def analytics(self) -> Path:
        return self.data_dir / "analytics.duckdb"

    @property
    def inbox(self) -> Inbox:
        return Inbox(self.receiver.settings.inbox_location)

    def change(self, action: Callable[[sqlite3.Connection, str], Any]) -> Any:
        """Run `action(conn, org_id)` in one service transaction (its outbox events are delivered)."""
        from service.store import db

        conn = self.service.connect()
        try:
            with db.transaction(conn):
                return action(conn, self.service.org_id)
        finally:
            conn.close()

    def end_waits(self) -> None:
        """As if the wait after each failed attempt were over (the inbox's retry_after in the past)."""
        with self.inbox as inbox, inbox._store.transaction() as cursor:  # whichever store the receiver uses
            cursor.execute("UPDATE {events} SET retry_after = '2000-01-01T00:00:00.000000Z' WHERE retry_after IS NOT NULL")

    def wait_for_events(self, count: int, timeout: float = 20.0) -> list:
        """The inbox's pending events once at least `count` are pending."""
        return wait_until(lambda: (p := self.inbox.pending()) and len(p) >= count and p, timeout=timeout)

    def tick(self) -> dg.SensorResult:
        resources = {"inbox": InboxResource(data_dir=str(self.data_dir)),
                     "orgs": OrgsResource(data_dir=str(self.data_dir), default_base_url=self.service.base_url)}
        context = dg.build_sensor_context(instance=self.instance, definitions=self.defs, resources=resources)
        return webhook_events_sensor(context)

    def execute(self, request: dg.RunRequest, defs: dg.Definitions | None = None) -> dg.ExecuteInProcessResult:
        job = (defs or self.defs).resolve_job_def(APPLY_WEBHOOK_EVENTS)
        org = request.partition_key or DEFAULT_ORG
        if not self.instance.has_dynamic_partition(ORGS.name, org):
            self.instance.add_dynamic_partitions(ORGS.name, [org])
        with api_key_in_env(self.service.api_key):
            return job.execute_in_process(
                run_config=request.run_config, instance=self.instance, tags=request.tags, partition_key=org,
                raise_on_error=False,
            )

    def apply_pending(self) -> dg.ExecuteInProcessResult:
        """One sensor tick and its run, which must succeed."""
        result = self.tick()
        assert len(result.run_requests) == 1, result.skip_reason
        run = self.execute(result.run_requests[0])
        assert run.success, run.get_step_failure_events()
        return run

    def query(self, sql: str) -> list[tuple]:
        return query(self.analytics, sql)

    def definitions_for(self, base_url: str) -> dg.Definitions:
        settings = load_settings(base_url=base_url, data_dir=self.data_dir)
        return make_definitions(settings, build_resources(settings))


def new_kol(conn: sqlite3.Connection, org_id: str, name: str, email: str | None = None) -> dict[str, Any]:
    from service.store import kols

    fields = {"full_name": name, "specialties": ["cardiology"], "email": email or f"{name.lower().replace(' ', '.')}@example.org"}
    return kols.create_kol(conn, org_id, fields, None)


def new_signal(conn: sqlite3.Connection, org_id: str, seed: int = 0) -> dict[str, Any]:
    from service.seed import product_refs, signal_fields
    from service.store import signals

    return signals.ingest_signal(conn, org_id, signal_fields(random.Random(seed), product_refs(conn, org_id), level="high"))


@pytest.fixture
def stack(make_service, tmp_path: Path) -> Iterator[Stack]:
    service = make_service(products=3, webhook_smtp_port=free_port(), **WEBHOOK_SETTINGS)
    data_dir = tmp_path / "data"
    receiver = ReceiverServer(ReceiverSettings(webhook_secrets="", data_dir=data_dir)).start()
    try:
        with Subscriptions(service.base_url, service.api_key) as subscriptions:
            subscriptions.register(receiver.url, list(EVENTS), receiver.settings.secrets_file)
        settings = load_settings(base_url=service.base_url, data_dir=data_dir)
        defs = make_definitions(settings, build_resources(settings))
        with dg.DagsterInstance.ephemeral() as instance:
            yield Stack(service, receiver, data_dir, with_orgs(instance), defs)
    finally:
        receiver.stop()
