"""The organizations as a dynamic partition: one asset set, one partition per organization.

Every asset that reads or writes one organization's data (the lake snapshots, the warehouse tables,
the KOL details, the webhook events) is partitioned by `orgs`; a run materializes one organization.
The partition set follows the registry (`commops orgs`, reflected by `orgs_sensor` and by the
commands themselves). Deployment-wide assets (analytics.duckdb, the CRM reconciliation) are not
partitioned.
"""

from __future__ import annotations

import dagster as dg

ORGS = dg.DynamicPartitionsDefinition(name="orgs")


def partition_org(context: dg.AssetExecutionContext) -> str:
    """The organization a run of a partitioned asset materializes."""
    return context.partition_key
