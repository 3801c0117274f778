"""The Dagster code location (workspace.yaml loads `pipelines.definitions`): one Definitions, and
the one place resources are built, for the code location, `commops sync`/`demo` and the tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import dagster as dg

from alerts.freshness import dagster_policy
from assets.analytics import ANALYTICS_KEY, build_analytics_asset
from assets.crm import CRM_ASSETS
from assets.kol_details import kol_details
from assets.lake import SNAPSHOT_ASSETS
from sync.catalog import CATALOG
from assets.mart_keys import MART_KEYS
from sync.progress import ProgressReporter
from assets.warehouse import TABLE_ASSETS
from assets.webhooks import WEBHOOK_ASSETS, webhook_events
from file_modes import restrict_umask
from file_modes.data_dir import secure_data_dir
from pipelines.health_sensor import sync_health_failure_sensor
from pipelines.jobs import JOBS
from pipelines.retention import retention_job, retention_schedule
from pipelines.marts_sensor import build_marts_refresh_sensor
from pipelines.schedules import build_schedules
from pipelines.sensors import SENSORS
from pipelines.sqlite_history import relax_history_commits
from resources.api import CommopsApiResource
from resources.crm import CrmSettings, NoCrmConfigured, build_crm_resource
from resources.iceberg import IcebergResource
from resources.webhooks import InboxResource
from resources.lake import LakeResource
from resources.marts import MartsResource
from resources.orgs import DEFAULT_ORG, ORGS_URL_ENV
from resources.orgs_resource import OrgsResource
from resources.settings import API_KEY_ENV, ICEBERG_CATALOG_URL_ENV, Settings, load_settings
from resources.warehouse import WarehouseResource
from resources.inbox import INBOX_URL_ENV

# The code location's name in every workspace (workspace.yaml, deploy/workspace.yaml, [tool.dg.project]):
# schedules and sensors keep their state by it, and `commops sync` records its runs under it.
CODE_LOCATION = "pipelines.definitions"

WAREHOUSE_ASSETS = [*TABLE_ASSETS, kol_details]
# analytics.duckdb is published after the nightly tables and marts, or after the incremental job's merges.
# The marts' dbt assets join these in make_definitions.
ASSETS = [
    *SNAPSHOT_ASSETS,
    *WAREHOUSE_ASSETS,
    build_analytics_asset([a.key for a in [*WAREHOUSE_ASSETS, webhook_events, *CRM_ASSETS]] + MART_KEYS),
    *WEBHOOK_ASSETS,
    *CRM_ASSETS,
]


def build_resources(
    settings: Settings,
    *,
    api_key_env: str = API_KEY_ENV,
    progress: ProgressReporter | None = None,
    max_concurrency: int = 4,
    crm: Any = None,
) -> dict[str, Any]:
    """The run's resources. Secrets only as dg.EnvVar: Dagster stores the variable's name, never its
    value (an organization's key is read from its variable by the API resource, at run time).
    The default organization's base URL is the explicit setting when one was given, else COMMOPS_BASE_URL;
    its key is read from `api_key_env` (a deployment of registered organizations only needs neither).
    The CRM is `crm` when given, else the one SALESFORCE_* / COMMOPS_CRM_CSV configure (if any)."""
    data_dir = str(settings.data_dir)
    return {
        "api": CommopsApiResource(
            max_concurrency=max_concurrency,
            timeout_seconds=settings.api_read_timeout_seconds,
            connect_timeout_seconds=settings.api_connect_timeout_seconds,
            request_deadline_seconds=settings.api_request_deadline_seconds,
            unresponsive_seconds=settings.api_unresponsive_seconds,
        ),
        "orgs": OrgsResource(
            data_dir=data_dir,
            url=dg.EnvVar(ORGS_URL_ENV) if os.environ.get(ORGS_URL_ENV) else None,
            default_base_url=settings.base_url,
            default_api_key_env=api_key_env,
        ),
        "lake": LakeResource(data_dir=data_dir, url=settings.lake_url),
        "warehouse": WarehouseResource(data_dir=data_dir),
        "marts": MartsResource(data_dir=data_dir),
        "iceberg": IcebergResource(
            catalog_url=dg.EnvVar(ICEBERG_CATALOG_URL_ENV) if os.environ.get(ICEBERG_CATALOG_URL_ENV) else None,
            warehouse=settings.iceberg_warehouse,
            namespace=settings.iceberg_namespace,
        ),
        "inbox": InboxResource(
            data_dir=data_dir,
            url=dg.EnvVar(INBOX_URL_ENV) if os.environ.get(INBOX_URL_ENV) else None,
            max_attempts=settings.events_max_attempts,
        ),
        "crm": crm or build_crm_resource(CrmSettings()) or NoCrmConfigured(),
        "progress": dg.ResourceDefinition.hardcoded_resource(progress or ProgressReporter()),
    }


def adopt_single_org_layout(settings: Settings) -> None:
    """A data directory from before organizations: its lake becomes organization `default`'s (the warehouse
    adopts its tables as it merges). Done as a process that runs the pipeline starts (the code location's
    load, the commands' job runner), never by a step; nothing is written when there is nothing to adopt."""
    lake = LakeResource(data_dir=str(settings.data_dir), url=settings.lake_url)
    lake.adopt_single_org_layout([spec.name for spec in CATALOG], DEFAULT_ORG)


def with_freshness_policies(assets: list, timezone: str) -> list:
    """The warehouse tables and `analytics` with Dagster's FreshnessPolicy of their deadline
    (alerts/freshness.py: COMMOPS_FRESHNESS_*), so the UI shows it beside our per-organization alerts."""
    due = {*(a.key for a in WAREHOUSE_ASSETS), ANALYTICS_KEY}

    def policy(spec: dg.AssetSpec) -> dg.AssetSpec:
        if spec.key not in due:
            return spec
        return spec.replace_attributes(freshness_policy=dagster_policy(spec.key.path[-1], timezone))

    return [a.map_asset_specs(policy) if isinstance(a, dg.AssetsDefinition) and due & set(a.keys) else a
            for a in assets]


def make_definitions(settings: Settings, resources: Mapping[str, Any] | None = None, *,
                     marts: bool = True) -> dg.Definitions:
    """The code location's definitions. `marts=False` leaves out the marts' dbt assets and their dbt resource
    (a process running a job that builds no marts then never imports dbt); analytics still names them upstream."""
    resources = dict(resources or build_resources(settings))
    assets = ASSETS
    if marts:
        from assets.marts import MARTS_PROJECT, dbt_cli, marts as dbt_marts

        assets = [*ASSETS, dbt_marts]
        resources.setdefault("dbt", dbt_cli(MARTS_PROJECT))
    return dg.Definitions(
        assets=with_freshness_policies(assets, settings.timezone),
        jobs=[*JOBS, retention_job],
        schedules=[*build_schedules(settings.timezone, crm_configured=not isinstance(resources["crm"], NoCrmConfigured)),
                   retention_schedule(settings.timezone)],
        sensors=[*SENSORS, sync_health_failure_sensor, build_marts_refresh_sensor(settings.marts_refresh_minutes)],
        resources=resources,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What `dg dev` and `dagster dev` load (lazily: importing this module reads no environment). The default
    organization's base URL is not copied into the resources: a run reads COMMOPS_BASE_URL as it needs it.

    Every Dagster process that runs this code loads it (the code server, each run worker, a Kubernetes
    run's pod), so this is where they get the umask, the data directory its modes (file_modes), a lake
    from before organizations its layout, and the embedded instance's commits that do not wait for the disk
    (sqlite_history)."""
    restrict_umask()
    relax_history_commits()
    settings = load_settings()
    notice = secure_data_dir(settings.data_dir, settings.data_group)
    if notice:
        print(notice, file=sys.stderr)
    adopt_single_org_layout(settings)
    return make_definitions(settings, build_resources(settings.model_copy(update={"base_url": None})))
