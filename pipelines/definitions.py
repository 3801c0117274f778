"""The Dagster code location (workspace.yaml loads `pipelines.definitions`): one Definitions."""

from __future__ import annotations

from typing import Any

import dagster as dg

from assets.kol_details import kol_details
from assets.lake import SNAPSHOT_ASSETS
from assets.progress import ProgressReporter
from assets.warehouse import TABLE_ASSETS
from pipelines.jobs import JOBS
from pipelines.schedules import SCHEDULES
from pipelines.sensors import SENSORS
from resources import settings
from resources.api import CommopsApiResource
from resources.warehouse import LakeResource, WarehouseResource

ASSETS = [*SNAPSHOT_ASSETS, *TABLE_ASSETS, kol_details]


def default_resources() -> dict[str, Any]:
    """Resources from the environment: COMMOPS_BASE_URL, COMMOPS_API_KEY, COMMOPS_DATA_DIR."""
    data_dir = str(settings.data_dir())
    return {
        "api": CommopsApiResource(
            base_url=dg.EnvVar(settings.BASE_URL_ENV),
            api_key=dg.EnvVar(settings.API_KEY_ENV),
        ),
        "lake": LakeResource(data_dir=data_dir),
        "warehouse": WarehouseResource(data_dir=data_dir),
        "progress": dg.ResourceDefinition.hardcoded_resource(ProgressReporter()),
    }


def make_definitions(resources: dict[str, Any] | None = None) -> dg.Definitions:
    return dg.Definitions(
        assets=ASSETS,
        jobs=JOBS,
        schedules=SCHEDULES,
        sensors=SENSORS,
        resources=resources or default_resources(),
    )


defs = make_definitions()
