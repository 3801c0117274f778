"""The marts' asset keys and group, read from the dbt project's model files without dbt.

Importing dagster-dbt costs a process about 3 s and 90 MB. The processes that build no marts (the CRM and
webhook runs, `commops sync --no-marts`, a command that fails before its run) name the marts with these keys
and never import it. assets/marts.py checks that its dbt assets have exactly these keys.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

import marts as marts_package

MARTS_PROJECT_DIR = Path(marts_package.__file__).resolve().parent  # the dbt project, shipped as package data
MARTS_GROUP = "marts"
SWAPPED_IN = "swapped_in"  # materialization metadata: whether this build became the marts analysts read


def _models(folder: str) -> list[str]:
    return sorted(path.stem for path in (MARTS_PROJECT_DIR / "models" / folder).glob("*.sql"))


MART_KEYS = [dg.AssetKey([MARTS_GROUP, name]) for name in _models("marts")]  # the marts analytics.duckdb publishes
STAGING_KEYS = [dg.AssetKey([MARTS_GROUP, "staging", name]) for name in _models("staging")]
