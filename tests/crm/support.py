"""KOL fixtures and a reconciled database for the CRM tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pyarrow as pa

from crm.salesforce_standin.discrepancies import plant_discrepancies
from commops_cli.crm_sandbox import Sandbox
from commops_cli.crm_run import run_reconciliation
from resources.environ import variables_set
from resources.crm.mapping import ContactMapping, to_batch

FIRST = ["Anna", "Ben", "Chloé", "David", "Eva", "Farid", "Grace", "Hiro", "Inès", "Jonas"]
LAST = ["Smith", "Müller", "Garcia", "Rossi", "Dubois", "Kowalski", "Nguyen", "Okafor", "Jensen", "Straße"]
TITLES = ["Chief of Cardiology", "Consultant Oncologist", "Professor of Neurology", "Attending Surgeon"]
KOL_TABLE = pa.schema(
    [
        ("id", pa.string()), ("full_name", pa.string()), ("title", pa.string()), ("institution", pa.string()),
        ("department", pa.string()), ("email", pa.string()), ("phone", pa.string()),
        ("location", pa.struct([("city", pa.string()), ("state", pa.string()), ("country", pa.string())])),
        ("is_archived", pa.bool_()),
    ]
)


def make_kols(n: int = 72) -> list[dict[str, Any]]:
    """n KOLs; every 25th has no email; phones alternate international and national forms."""
    kols = []
    for i in range(n):
        first, last = FIRST[i % 10], LAST[(i // 10) % 10] + ("" if i < 100 else str(i))
        kols.append({
            "id": f"kol_{i:04d}",
            "full_name": f"{first} {last}",
            "title": TITLES[i % 4],
            "institution": f"Saint {last} Hospital {i % 7}",
            "department": ["Cardiology", "Oncology", "Neurology"][i % 3],
            "email": None if i % 25 == 24 else f"{first.lower()}.{last.lower()}.{i}@hospital.org",
            "phone": f"+49 30 {1000000 + i}" if i % 2 else f"(555) 010-{1000 + i}",
            "location": {"city": "Berlin" if i % 2 else "Boston", "state": None if i % 2 else "MA",
                         "country": "DE" if i % 2 else "US"},
            "is_archived": False,
        })
    return kols


def load(conn: duckdb.DuckDBPyConnection, kols: list[dict[str, Any]], contacts: list[dict[str, Any]]) -> None:
    """Tables `kols` and `contacts` (canonical columns) on conn."""
    kol_arrow = pa.Table.from_pylist(kols, schema=KOL_TABLE)
    contact_arrow = pa.Table.from_batches([to_batch(ContactMapping().from_flat(c) for c in contacts)])
    conn.execute("CREATE OR REPLACE TABLE kols AS SELECT * FROM kol_arrow")
    conn.execute("CREATE OR REPLACE TABLE contacts AS SELECT * FROM contact_arrow")


def planted(seed: int = 7, n: int = 72, rate: float = 0.4) -> tuple[list[dict], list[dict], dict[str, str]]:
    kols = make_kols(n)
    contacts, expected = plant_discrepancies(kols, rate, seed)
    return kols, contacts, expected


@contextmanager
def crm_env(box: Sandbox | dict[str, str]) -> Iterator[None]:
    """The sandbox's SALESFORCE_* settings (or these variables) in the environment, where the CRM resource reads them."""
    with variables_set(box if isinstance(box, dict) else box.env):
        yield


def reconcile_against(box: Sandbox | dict[str, str], data_dir: Path, apply: bool = False):
    with crm_env(box):
        return run_reconciliation(data_dir=data_dir, apply=apply, instance=dg.DagsterInstance.ephemeral())


def rows(path: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute(sql).fetchall()
