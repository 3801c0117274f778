"""Sensors. The webhook-driven incremental updates (a later issue) add theirs here: they read
the receiver's inbox and write the warehouse through assets.warehouse.merge_rows."""

from __future__ import annotations

import dagster as dg

SENSORS: list[dg.SensorDefinition] = []
