"""The CRM admins' commands that run no Dagster job: a probable match confirmed or rejected (`run_review`,
crm/review.py), and what they and `commops reconcile` share: the configured CRM, the data directory's
warehouse, failures as one line (`ReconcileError`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from crm import review, writeback
from crm.tables import DEFAULT_ORG
from resources.crm import CrmError, configured_crm_resource
from resources.settings import load_settings
from resources.warehouse import WarehouseResource


class ReconcileError(RuntimeError):
    """The reconciliation failed; the message is one line saying why."""


def crm_resource():
    """The configured CRM resource; a ReconcileError naming the variable when a setting is invalid or none is set."""
    try:
        return configured_crm_resource()
    except CrmError as error:
        raise ReconcileError(str(error)) from None


@dataclass
class ReviewOutcome:
    action: str  # confirm or reject
    kol_id: str
    crm_id: str
    done: bool  # False: nothing to do (already confirmed / rejected)
    error: str | None = None


def warehouse_for(data_dir: str | os.PathLike[str] | None) -> WarehouseResource:
    """The data directory's warehouse; a ReconcileError when there is none yet."""
    settings = load_settings(data_dir=data_dir)
    warehouse = WarehouseResource(data_dir=str(settings.data_dir))
    if not warehouse.path.exists():
        raise ReconcileError(f"no warehouse in {settings.data_dir}: run `commops sync` and `commops reconcile` first")
    return warehouse


def run_review(action: str, kol_id: str, crm_id: str, data_dir: str | os.PathLike[str] | None = None,
               org: str = DEFAULT_ORG, user: str | None = None) -> ReviewOutcome:
    """Confirm (the KOL id written to the contact's external-id field in Salesforce, read back) or reject
    (remembered in the data directory) a probable match, with its crm_writeback_audit row; analytics.duckdb
    republished."""
    settings = load_settings(data_dir=data_dir)
    warehouse = warehouse_for(data_dir)
    crm = crm_resource() if action == "confirm" else None
    if crm is not None and not crm.writable:
        raise ReconcileError(f"confirm writes the KOL id to the contact in Salesforce, and the CRM is {crm.source_name} "
                             "(read-only): unset COMMOPS_CRM_CSV and set the SALESFORCE_* login")
    try:
        with warehouse.writer() as session:
            if not session.exists(review.CONTACTS_TABLE):
                raise review.ReviewError("no CRM contacts in the warehouse yet: run `commops reconcile` first")
            old = review.check_pair(session.conn, kol_id, crm_id, org)
            score = review.pair_score(session.conn, kol_id, crm_id, org)
        if action == "reject":
            done = review.remember_rejection(settings.data_dir, kol_id, crm_id)
            audit = review.audit_row("reject", "recorded", kol_id, crm_id, org=org, user=user, score=score) if done else None
        elif old == kol_id:
            done, audit = False, None
        else:
            # outside the writer lock (Salesforce may be slow) and outside a run: the EnvVar secrets resolved here
            with crm.process_config_and_initialize_cm() as live:
                audit = review.confirm(live, kol_id, crm_id, old, org=org, user=user, score=score)
            done = True
    except review.ReviewError as error:
        raise ReconcileError(str(error)) from None
    error = None
    if audit is not None:
        with warehouse.writer() as session:
            writeback.record_audit(session.conn, audit)
        warehouse.publish_analytics()
        error = audit["error"][0].as_py()
    return ReviewOutcome(action, kol_id, crm_id, done, error)
