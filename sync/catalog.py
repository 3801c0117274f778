"""The one declarative description of the four API resources.

Everything per resource is driven from here: the lake snapshot asset (path, walks, sort,
Arrow schema), the warehouse table and its child tables, and the checks (id prefix,
required fields, enum columns, references to products). Add a resource here, not in the
asset modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sync import schemas
from sync.schemas import FETCHED_AT
from commops_spec import constants as c
from resources.commops_api import ListSource


@dataclass(frozen=True)
class ChildTable:
    """A flattened child table rebuilt for the parent ids each merge touches.

    `select_sql` selects the child rows from `{parents}`, the parent rows the caller gives (those a
    merge wrote), aliased `p`; `columns` are (name, DuckDB type, comment).
    """

    name: str
    description: str
    columns: tuple[tuple[str, str, str], ...]  # the first is the parent's id
    select_sql: str

    @property
    def parent_key(self) -> str:
        return self.columns[0][0]


@dataclass(frozen=True)
class ResourceSpec:
    name: str  # asset key suffix, lake folder and warehouse table name
    id_prefix: str
    schema: pa.Schema
    description: str
    path: str | None = None  # API list path, relative to the base URL (which ends in /v1); None: not from a list
    source: str | None = None  # where the rows come from when not from `path` (webhook tables)
    walks: tuple[dict[str, str], ...] = ({},)  # one list per params dict (KOLs: active, archived), results unioned
    walk_defaults: tuple[dict[str, Any], ...] = ({},)  # values filled per list when a record lacks them
    # Per list, the index of the list its rows leave for (active KOLs are archived), None where rows only enter.
    walk_drains_into: tuple[int | None, ...] = (None,)
    # A single object's path ("/kols/{id}"), to settle rows a repair pass no longer listed; None: no lookup.
    lookup_path: str | None = None
    # The field lists are paged by (ascending, ties by id). It never changes for a row, so the key range
    # each page shows tells which rows a walk covered (resources/commops_api/_paging.py).
    sort: str | None = "created_at"
    key: str = "id"
    # The version of a row, compared field by field (a NULL on either side defers to the next field):
    # merges keep the newer version. FETCHED_AT (when this process received the row) is the last word.
    version: tuple[str, ...] = (FETCHED_AT,)
    # Fields recording when a row was received rather than what it says: an unchanged row brought again
    # differs only in them, and is left in place (resources/warehouse.py, the row digest).
    observed: tuple[str, ...] = (FETCHED_AT,)
    required: tuple[str, ...] = ("id",)  # fields the spec guarantees; every other field may be absent
    enums: dict[str, tuple[str, ...]] = field(default_factory=dict)  # SQL expression -> allowed values
    # SQL expression over the table aliased `t` yielding referenced product ids, one per row (unnest)
    product_refs: str | None = None
    children: tuple[ChildTable, ...] = ()

    @property
    def table(self) -> str:
        return self.name

    @property
    def history_view(self) -> str:
        return f"{self.name}_history"

    @property
    def id_pattern(self) -> str:
        """The regular expression a spec id of this resource matches whole (DuckDB's regexp_full_match)."""
        return c.id_pattern(self.id_prefix)

    def walk_label(self, index: int) -> str:
        """The list's name in progress output and run metadata: `kols is_archived=false`, or `campaigns`."""
        if len(self.walks) == 1:
            return self.name
        return f"{self.name} " + " ".join(f"{k}={v}" for k, v in self.walks[index].items())

    def list_sources(self) -> list[ListSource]:
        """The lists of one listing of this resource, for ApiClient.listing."""
        return [
            ListSource(
                label=self.walk_label(i),
                params=dict(params),
                drains_into=None if self.walk_drains_into[i] is None else self.walk_label(self.walk_drains_into[i]),
            )
            for i, params in enumerate(self.walks)
        ]


KOLS = ResourceSpec(
    name="kols",
    path="/kols",
    id_prefix=c.ID_PREFIXES["kol"],
    schema=schemas.KOLS,
    description="Key opinion leaders, active and archived (list shape of GET /v1/kols), one row per KOL.",
    walks=({"is_archived": "false"}, {"is_archived": "true"}),
    walk_defaults=({"is_archived": False}, {"is_archived": True}),
    walk_drains_into=(1, None),  # archiving moves a KOL from the active list to the archived list, one way
    lookup_path="/kols/{id}",
    version=("updated_at", FETCHED_AT),
    # Required on creation (full_name, specialties), defaulted (tier), stated by 4.1 (created_at, updated_at).
    required=("id", "full_name", "specialties", "tier", "is_archived", "created_at", "updated_at"),
    enums={"tier": c.KOL_TIERS, "engagement_level": c.ENGAGEMENT_LEVELS},
)

CAMPAIGNS = ResourceSpec(
    name="campaigns",
    path="/campaigns",
    id_prefix=c.ID_PREFIXES["campaign"],
    schema=schemas.CAMPAIGNS,
    description="Email campaigns with engagement metrics (GET /v1/campaigns), one row per campaign.",
    required=("id", "name", "type", "status", "created_at"),  # name and type required on creation, status draft
    enums={"type": c.CAMPAIGN_TYPES, "status": c.CAMPAIGN_STATUSES, "schedule.type": c.SCHEDULE_TYPES},
    product_refs="unnest(t.products)",
)

PRODUCTS = ResourceSpec(
    name="products",
    path="/products",
    id_prefix=c.ID_PREFIXES["product"],
    schema=schemas.PRODUCTS,
    description="Product catalog with regulatory status per market (GET /v1/products), one row per product.",
    # The spec states no product field as always present (products have no create operation).
    enums={"status": c.PRODUCT_STATUSES},
    children=(
        ChildTable(
            name="product_market_status",
            description="Regulatory status of each product per market, flattened from products.market_status.",
            columns=(
                ("product_id", "VARCHAR", "Product identifier (products.id)"),
                ("market", "VARCHAR", "Market code (US, EU, CN, JP, IN)"),
                ("status", "VARCHAR", "approved or under_review"),
                ("clearance_number", "VARCHAR", "Clearance number (e.g. FDA 510(k) K-number) where the market has one"),
                ("ce_mark", "BOOLEAN", "CE mark present (EU-style markets)"),
            ),
            select_sql=(
                "SELECT p.id, e.key, e.value.status, e.value.clearance_number, e.value.ce_mark "
                "FROM {parents} p, unnest(map_entries(p.market_status)) AS u(e)"
            ),
        ),
    ),
)

SIGNALS = ResourceSpec(
    name="signals",
    path="/signals",
    id_prefix=c.ID_PREFIXES["signal"],
    schema=schemas.SIGNALS,
    description="Regulatory and industry signals with AI summary and impact (GET /v1/signals), one row per signal.",
    sort="fetched_at",  # grows with ingestion, so new signals land on the last page
    # The spec states no signal field as always present; fetched_at orders the walk when the server sends it.
    enums={"impact.level": c.IMPACT_LEVELS, "sentiment": c.SENTIMENTS},
    product_refs="unnest(t.product_relevance).product_id",
    children=(
        ChildTable(
            name="signal_product_relevance",
            description="Products each signal is relevant to, flattened from signals.product_relevance.",
            columns=(
                ("signal_id", "VARCHAR", "Signal identifier (signals.id)"),
                ("product_id", "VARCHAR", "Product identifier (products.id)"),
                ("product_name", "VARCHAR", "Product name as the signal names it"),
                ("relevance_type", "VARCHAR", "Kind of relevance: direct, competitor, same_category or indication (as the service sends it; the spec lists no values)"),
                ("relevance_score", "DOUBLE", "Relevance score"),
            ),
            select_sql=(
                "SELECT p.id, r.product_id, r.product_name, r.relevance_type, r.relevance_score "
                "FROM {parents} p, unnest(p.product_relevance) AS u(r)"
            ),
        ),
    ),
)

CATALOG: tuple[ResourceSpec, ...] = (KOLS, CAMPAIGNS, PRODUCTS, SIGNALS)
BY_NAME = {spec.name: spec for spec in CATALOG}

# The order a run fetches the lists in (lists not named here come after). Each table's merge runs in the
# background while the next list is fetched (assets/warehouse.py), so the small lists come first (their
# merges hide behind the signals' fetch; products before campaigns, whose merge checks references to
# today's products), the signals' merge (the biggest) hides behind the KOLs' fetch, and only the KOLs'
# merge is left to wait for.
FETCH_ORDER = (PRODUCTS.name, CAMPAIGNS.name, SIGNALS.name, KOLS.name)


def fetched_after(name: str) -> tuple[str, ...]:
    """The lists a run fetches after `name`'s (by FETCH_ORDER, then the catalog's order)."""
    order = [*FETCH_ORDER, *(spec.name for spec in CATALOG if spec.name not in FETCH_ORDER)]
    return tuple(order[order.index(name) + 1:])


# Not a list resource: the KOL detail (GET /v1/kols/{id}) enrichment table, merged the same way.
KOL_DETAILS = ResourceSpec(
    name="kol_details",
    path="/kols/{id}",
    id_prefix=c.ID_PREFIXES["kol"],
    schema=schemas.KOL_DETAILS,
    description=(
        "KOL detail fields the list lacks (bio, notes, research interests, social, contact address, metrics), "
        "fetched with GET /v1/kols/{id} for KOLs that are new or changed since their last enrichment."
    ),
    sort=None,
    version=("updated_at", "enriched_at"),
    observed=("enriched_at", FETCHED_AT),
    required=("id", "updated_at", "enriched_at"),
)
# Detail fields already stored in `kols` (list shape), so not unknown: not copied to _extra.
KOL_DETAIL_FIELDS_IN_KOLS = (
    "full_name", "title", "institution", "department", "specialties", "expertise_areas", "tags",
    "tier", "engagement_level", "created_at", "events", "campaigns", "is_archived", "location",
    "email", "phone", "event_count", "last_interaction", "interactions", "publications",
)

# Webhook-driven tables (assets/webhooks/): written by the incremental job only.
CAMPAIGN_ENGAGEMENT = ResourceSpec(
    name="campaign_engagement",
    source="webhook events campaign.email_opened, campaign.link_clicked",
    id_prefix=c.ID_PREFIXES["webhook_event"],
    schema=schemas.CAMPAIGN_ENGAGEMENT,
    description=(
        "Email opens and link clicks, one row per campaign.email_opened or campaign.link_clicked webhook "
        "event (not available from the list endpoints: filled only while the receiver and the sensor run)."
    ),
    sort=None,
    key="event_id",
    version=(),  # an event never changes: a re-applied event replaces its identical row
    required=("event_id", "event", "campaign_id"),
)

WEBHOOK_EVENTS = ResourceSpec(
    name="webhook_events",
    source="webhook events (every event name)",
    id_prefix=c.ID_PREFIXES["webhook_event"],
    schema=schemas.WEBHOOK_EVENTS,
    description=(
        "Every webhook event the incremental job settled, one row per event id: applied, or quarantined with its "
        "error; its data as sent and the run that wrote it (job apply_webhook_events)."
    ),
    sort=None,
    version=(),  # the run that settled the event last wins (applied after a retry, applied again after a lost mark)
    required=("id", "event", "received_at", "status", "run_id"),
)

# The current-state tables (one row per org and key, with their child tables) the analytics publish also
# merges into Iceberg tables (resources/iceberg.py).
ICEBERG_TABLES: tuple[ResourceSpec, ...] = (*CATALOG, KOL_DETAILS, CAMPAIGN_ENGAGEMENT, WEBHOOK_EVENTS)
