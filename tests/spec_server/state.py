"""In-memory state of the spec server: records, a skewable clock, seeding, mutations, page hooks.

Every record is kept in one internal dict per resource (id -> record); the list and detail shapes are
built from it on each request, so what a list page returns is the state at the moment of that request.
One re-entrant lock guards everything: a page hook runs under it, right after its page was computed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

RESOURCES = ("kols", "campaigns", "products", "signals")
ID_PREFIXES = {"kols": "kol_", "campaigns": "cmp_", "products": "prod_", "signals": "sig_"}
# The sort fields each list accepts; the first is the default (order desc).
SORT_FIELDS = {
    "kols": ("created_at",),
    "campaigns": ("created_at",),
    "products": ("created_at",),
    "signals": ("published_at", "fetched_at"),
}

_FIRST = ("Anna", "Wei", "Carlos", "Fatima", "Kenji", "Priya", "Olu", "Ingrid", "Mateo", "Sara", "Yusuf", "Li")
_LAST = ("Kowalski", "Chen", "Okafor", "Rossi", "Tanaka", "Sharma", "Dubois", "Nguyen", "Haddad", "Larsen")
_TITLES = ("MD", "MD, PhD", "Professor of Medicine", "Chief of Cardiology", "Consultant Surgeon", "Associate Professor")
_INSTITUTIONS = ("Mercy General Hospital", "Karolinska Institutet", "Charite Berlin", "Mayo Clinic",
                 "Tokyo Medical University", "AIIMS Delhi", "Peking Union Medical College Hospital")
_DEPARTMENTS = ("Cardiology", "Interventional Radiology", "Neurology", "Orthopedics", "Oncology")
_SPECIALTIES = ("cardiology", "interventional_cardiology", "electrophysiology", "neurology", "orthopedic_surgery",
                "oncology", "radiology", "vascular_surgery")
_EXPERTISE = ("structural heart", "TAVR", "ablation", "stroke thrombectomy", "spinal fusion", "imaging AI")
_TAGS = ("advisory_board", "speaker", "investigator", "early_adopter", "key_account")
_CITIES = (("Boston", "US", "MA"), ("Stockholm", "SE", "Stockholm County"), ("Berlin", "DE", "Berlin"),
           ("Tokyo", "JP", "Tokyo"), ("New Delhi", "IN", "Delhi"), ("Beijing", "CN", "Beijing"),
           ("Toronto", "CA", "ON"), ("Lyon", "FR", "Auvergne-Rhone-Alpes"))
_CAMPAIGN_TYPES = ("product_update", "event_invitation", "new_product_launch", "newsletter", "custom")
_CAMPAIGN_STATUSES = ("draft", "active", "paused", "completed")
_PRODUCT_STATUSES = ("active", "in_development", "discontinued")
_MARKETS = ("US", "EU", "CN", "JP", "IN")
_SOURCES = (("FDA", "US", "north_america"), ("EMA", "EU", "europe"), ("NMPA", "CN", "asia_pacific"),
            ("PMDA", "JP", "asia_pacific"), ("MHRA", "GB", "europe"), ("Industry News", "US", "global"))
_IMPACT = ("critical", "high", "medium", "low")
_SENTIMENTS = ("positive", "neutral", "negative")


def stamp(moment: datetime) -> str:
    """ISO 8601 to the second, UTC, with Z: how this server writes every timestamp."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SpecState:
    """The server's data. Thread-safe; every public method takes the lock."""

    def __init__(self, *, random_seed: int = 0, clock_offset: float = 0.0, naive_timestamps: float = 0.0):
        self.lock = threading.RLock()
        self.clock_offset = clock_offset  # seconds the server's clock is ahead (negative: behind)
        # Share of new records whose timestamps are written without a zone designator (valid ISO 8601).
        self.naive_timestamps = naive_timestamps
        self.latency = 0.0  # seconds every list and detail request takes (a slow server), outside the lock
        self._rng = random.Random(random_seed)
        self._records: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in RESOURCES}
        self._hooks: list[tuple[str, int, dict[str, str], Callable[[], Any]]] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        # Every creation, archival and deletion after seeding: (real UTC time, kind, resource, id), in order.
        self.changes: list[tuple[datetime, str, str, str]] = []
        self._names = 0
        self._detail_faults: dict[str, list[int]] = {}  # kol id -> [status, answers left]

    # -- clock ---------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The server's clock: real time plus clock_offset."""
        return datetime.now(UTC) + timedelta(seconds=self.clock_offset)

    # -- seeding -------------------------------------------------------------------------------

    def seed(self, *, kols: int = 0, archived_kols: int = 0, campaigns: int = 0, products: int = 0, signals: int = 0) -> None:
        """Deterministic records created days ago (ties in created_at included: bulk imports share a second)."""
        with self.lock:
            anchor = self.now().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
            for name, count in (("products", products), ("kols", kols + archived_kols), ("campaigns", campaigns), ("signals", signals)):
                previous: datetime | None = None
                for i in range(count):
                    # every 7th record shares the previous one's second, as a bulk import would
                    if previous is not None and i % 7 == 0:
                        created = previous
                    else:
                        created = anchor - timedelta(seconds=self._rng.randrange(0, 365 * 86400))
                    previous = created
                    record = self._new(name, created)
                    if name == "kols" and i >= kols:
                        record["_archived"] = True
                        record["updated_at"] = stamp(created + timedelta(days=1))

    # -- mutations (the tests' Python API) -----------------------------------------------------

    def create(self, resource: str, n: int, *, stamped_ahead: float = 0.0, ids: tuple[str, ...] = ()) -> list[str]:
        """`n` new records created now (server clock); returns their ids. `stamped_ahead` seconds are
        added to their timestamps only (a database clock ahead of the web tier's Date header). The first
        records take `ids` when given (any string: what a server that breaks the spec's id form sends)."""
        with self.lock:
            now = self.now() + timedelta(seconds=stamped_ahead)
            chosen = [*ids, *(None for _ in range(n - len(ids)))]
            made = [self._new(resource, now, item_id)["id"] for item_id in chosen]
            self._log("created", resource, made)
            return made

    def archive_kols(self, ids: list[str]) -> None:
        with self.lock:
            now = stamp(self.now())
            archived = []
            for kol_id in ids:
                record = self._records["kols"][kol_id]
                if not record["_archived"]:
                    record["_archived"] = True
                    record["updated_at"] = now
                    archived.append(kol_id)
            self._log("archived", "kols", archived)

    def update(self, resource: str, item_id: str, **fields: Any) -> None:
        """Set fields of one record, its updated_at moved to now where it has one. A field the record lacks is
        one the spec does not name (schema drift); KOLs' list shape keeps only the spec's fields."""
        with self.lock:
            record = self._records[resource][item_id]
            record.update(fields)
            if "updated_at" in record:
                record["updated_at"] = stamp(self.now())

    def delete(self, resource: str, ids: list[str]) -> None:
        with self.lock:
            for item_id in ids:
                del self._records[resource][item_id]
            self._log("deleted", resource, list(ids))

    def active_kol_ids(self) -> list[str]:
        with self.lock:
            return [kol_id for kol_id, r in self._records["kols"].items() if not r["_archived"]]

    def _log(self, kind: str, resource: str, ids: list[str]) -> None:
        moment = datetime.now(UTC)  # real time: the change log is read against the client's clock
        self.changes.extend((moment, kind, resource, item_id) for item_id in ids)

    def on_page(self, path: str, page: int, action: Callable[[], Any], params: dict[str, Any] | None = None) -> None:
        """Run `action` once, right after the response to `page` of `path` (e.g. "/kols") is computed.
        `params` narrows the match to requests whose (defaulted) query has those values, e.g.
        {"is_archived": "false"}; values compare as lower-case strings."""
        wanted = {k: str(v).lower() for k, v in (params or {}).items()}
        with self.lock:
            self._hooks.append((_resource_of(path), page, wanted, action))

    # -- reading -------------------------------------------------------------------------------

    def truth(self, resource: str) -> list[dict[str, Any]]:
        """Every record in list shape, as the list endpoint returns it (KOLs: active and archived)."""
        with self.lock:
            return [self._list_item(resource, r) for r in self._sorted(resource, "created_at" if resource != "signals" else "published_at", "asc")]

    def archived_kol_ids(self) -> set[str]:
        with self.lock:
            return {kol_id for kol_id, r in self._records["kols"].items() if r["_archived"]}

    def list_page(self, resource: str, query: dict[str, str], *, page: int, per_page: int, sort: str, order: str,
                  archived: bool | None) -> dict[str, Any]:
        """The list envelope for one page at this moment; then fires a matching page hook, under the lock."""
        with self.lock:
            records = self._sorted(resource, sort, order)
            if resource == "kols":
                records = [r for r in records if r["_archived"] == archived]
            total = len(records)
            start = (page - 1) * per_page
            items = [self._list_item(resource, r) for r in records[start:start + per_page]]
            meta: dict[str, Any] = {"page": page, "per_page": per_page, "total": total}
            if resource == "kols":
                meta["total_pages"] = -(-total // per_page)
            if resource == "signals":
                meta["unread_count"] = sum(1 for r in records if not r["is_read"])
            body = {"data": items, "meta": meta}
            self._fire_hooks(resource, page, query)
            return body

    def detail(self, kol_id: str) -> dict[str, Any] | None:
        with self.lock:
            record = self._records["kols"].get(kol_id)
            return None if record is None else _kol_detail(record)

    def fail_detail(self, kol_id: str, times: int, status: int = 400) -> None:
        """The next `times` GET /v1/kols/{kol_id} answer `status` (an error about that KOL alone)."""
        with self.lock:
            self._detail_faults[kol_id] = [status, times]

    def detail_fault(self, kol_id: str) -> int | None:
        """The status the next GET of this KOL must answer instead of its detail (one answer used), or None."""
        with self.lock:
            fault = self._detail_faults.get(kol_id)
            if not fault or fault[1] <= 0:
                return None
            fault[1] -= 1
            return fault[0]

    def log_request(self, path: str, query: dict[str, str]) -> None:
        with self.lock:
            self.requests.append((path, query))

    # -- internals -----------------------------------------------------------------------------

    def _fire_hooks(self, resource: str, page: int, query: dict[str, str]) -> None:
        for hook in list(self._hooks):
            hook_resource, hook_page, wanted, action = hook
            if hook_resource == resource and hook_page == page and all(query.get(k) == v for k, v in wanted.items()):
                self._hooks.remove(hook)
                action()

    def _sorted(self, resource: str, sort: str, order: str) -> list[dict[str, Any]]:
        # ISO strings to the second sort as text once the optional Z is set aside; ties broken by id, same direction
        return sorted(self._records[resource].values(), key=lambda r: (r[sort].rstrip("Z"), r["id"]), reverse=order == "desc")

    def _new_id(self, resource: str) -> str:
        while True:
            item_id = ID_PREFIXES[resource] + "".join(self._rng.choice("0123456789abcdefghjkmnpqrstvwxyz") for _ in range(14))
            if item_id not in self._records[resource]:
                return item_id

    def _new(self, resource: str, created: datetime, item_id: str | None = None) -> dict[str, Any]:
        builder = {"kols": self._kol, "campaigns": self._campaign, "products": self._product, "signals": self._signal}[resource]
        record = builder(item_id or self._new_id(resource), created)
        if self.naive_timestamps and self._rng.random() < self.naive_timestamps:
            _without_zone(record)
        self._records[resource][record["id"]] = record
        return record

    def _kol(self, kol_id: str, created: datetime) -> dict[str, Any]:
        rng = self._rng
        self._names += 1
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        city, country, state = rng.choice(_CITIES)
        events = rng.randrange(0, 40)
        return {
            "id": kol_id,
            "full_name": f"Dr. {first} {last}",
            "title": rng.choice(_TITLES),
            "institution": rng.choice(_INSTITUTIONS),
            "department": rng.choice(_DEPARTMENTS),
            "specialties": rng.sample(_SPECIALTIES, rng.randrange(1, 3)),
            "expertise_areas": rng.sample(_EXPERTISE, rng.randrange(0, 3)),
            "research_interests": rng.sample(_EXPERTISE, rng.randrange(0, 2)),
            "tags": rng.sample(_TAGS, rng.randrange(0, 3)),
            "tier": rng.choice(("tier_1", "tier_2", "tier_3", "tier_3")),
            "engagement_level": rng.choice(("high", "medium", "low")),
            "email": f"{first.lower()}.{last.lower()}.{self._names}@example-hospital.org",
            "phone": f"+1-555-{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}",
            "city": city, "state": state, "country": country,
            "street": f"{rng.randrange(1, 400)} Hospital Road",
            "postal_code": f"{rng.randrange(10000, 99999)}",
            "bio": f"{first} {last} leads clinical research in {rng.choice(_DEPARTMENTS).lower()}.",
            "notes": rng.choice(("", "Met at ESC congress.", "Prefers email contact.")),
            "social": {"linkedin": f"https://www.linkedin.com/in/{first.lower()}-{last.lower()}-{self._names}",
                       "twitter": f"@{first.lower()}{self._names}"},
            "event_count": events,
            "metrics": {"total_events": events, "total_campaigns": rng.randrange(0, 12),
                        "email_open_rate": round(rng.random(), 3), "response_rate": round(rng.random(), 3),
                        "h_index": rng.randrange(0, 80), "publications_count": rng.randrange(0, 300)},
            "last_interaction": stamp(created + timedelta(hours=rng.randrange(1, 48))) if events else None,
            "created_at": stamp(created),
            "updated_at": stamp(created),
            "_archived": False,
        }

    def _campaign(self, cmp_id: str, created: datetime) -> dict[str, Any]:
        rng = self._rng
        status = rng.choice(_CAMPAIGN_STATUSES)
        sent = rng.randrange(50, 2000) if status in ("active", "completed") else 0
        delivered = int(sent * 0.97)
        opened = int(delivered * rng.uniform(0.2, 0.6))
        clicked = int(opened * rng.uniform(0.05, 0.3))
        schedule_type = rng.choice(("immediate", "scheduled", "recurring"))
        schedule: dict[str, Any] = {"type": schedule_type}
        if schedule_type == "scheduled":
            schedule["send_at"] = stamp(created + timedelta(days=rng.randrange(1, 10)))
        return {
            "id": cmp_id,
            "name": f"{rng.choice(('Q1', 'Q2', 'Q3', 'Q4'))} {rng.choice(('TAVR', 'Ablation', 'Stroke', 'Spine'))} update",
            "description": "Quarterly update for the clinical community.",
            "type": rng.choice(_CAMPAIGN_TYPES),
            "status": status,
            "audience_count": rng.randrange(0, 5000),
            "email": {"subject": "News for {{first_name}}", "from_name": "Medical Affairs"},
            "schedule": schedule,
            "metrics": {"sent": sent, "delivered": delivered, "opened": opened, "clicked": clicked,
                        "open_rate": round(opened / delivered, 4) if delivered else 0.0,
                        "click_rate": round(clicked / delivered, 4) if delivered else 0.0},
            "created_at": stamp(created),
            "sent_at": stamp(created + timedelta(hours=2)) if sent else None,
        }

    def _product(self, prod_id: str, created: datetime) -> dict[str, Any]:
        rng = self._rng
        markets = sorted(rng.sample(_MARKETS, rng.randrange(1, 4)), key=_MARKETS.index)
        market_status: dict[str, Any] = {}
        for market in markets:
            status = rng.choice(("approved", "under_review"))
            if market == "EU":
                market_status[market] = {"status": status, "ce_mark": status == "approved"}
            elif status == "approved":
                market_status[market] = {"status": status, "clearance_number": f"K{rng.randrange(100000, 999999)}"}
            else:
                market_status[market] = {"status": status}
        line = rng.randrange(1, 4)
        return {
            "id": prod_id,
            "name": f"{rng.choice(('Cardio', 'Neuro', 'Ortho', 'Vaso'))}{rng.choice(('Flow', 'Guard', 'Link', 'Sense'))} {rng.randrange(2, 9)}",
            "description": "Minimally invasive device.",
            "product_line": {"id": f"pl_{line:04d}", "name": ("Structural Heart", "Neurovascular", "Spine")[line - 1]},
            "status": rng.choice(_PRODUCT_STATUSES),
            "regulatory_status": rng.choice(("FDA 510(k) cleared", "CE marked", "Pending PMA")),
            "target_markets": markets,
            "key_features": rng.sample(("low profile", "MRI conditional", "wireless", "bioresorbable"), 2),
            "specifications": [{"name": "Diameter", "value": f"{rng.randrange(2, 30)} mm"},
                               {"name": "Length", "value": f"{rng.randrange(10, 200)} mm"}],
            "market_status": market_status,
            "created_at": stamp(created),
        }

    def _signal(self, sig_id: str, created: datetime) -> dict[str, Any]:
        rng = self._rng
        name, country, region = rng.choice(_SOURCES)
        products = list(self._records["products"].values())
        relevance = [
            {"product_id": p["id"], "product_name": p["name"], "relevance_type": rng.choice(("direct", "competitor", "category")),
             "relevance_score": round(rng.random(), 2)}
            for p in (rng.sample(products, min(len(products), rng.randrange(0, 3))) if products else [])
        ]
        return {
            "id": sig_id,
            "title": f"{name} notice on {rng.choice(('catheters', 'stents', 'neurostimulators', 'implants'))}",
            "url": f"https://news.example.org/{sig_id}",
            "source": {"name": name, "country": country, "region": region},
            "content": "Full text of the notice.",
            "ai_summary": "The regulator updated guidance affecting this device category.",
            "impact": {"level": rng.choice(_IMPACT), "score": round(rng.uniform(0, 100), 1),
                       "categories": rng.sample(("safety", "labeling", "reimbursement", "competition"), 2)},
            "sentiment": rng.choice(_SENTIMENTS),
            "product_relevance": relevance,
            "is_read": rng.random() < 0.4,
            "is_bookmarked": rng.random() < 0.1,
            "published_at": stamp(created - timedelta(hours=rng.randrange(1, 72))),
            "fetched_at": stamp(created),
        }

    def _list_item(self, resource: str, record: dict[str, Any]) -> dict[str, Any]:
        if resource == "kols":
            return _kol_list_item(record)
        return {k: v for k, v in record.items() if not k.startswith("_")}


def _without_zone(record: dict[str, Any]) -> None:
    """Every timestamp of the record written without its zone designator (`...T10:00:00`: UTC, valid ISO 8601)."""
    for key, value in record.items():
        if isinstance(value, dict):
            _without_zone(value)
        elif isinstance(value, str) and len(value) == 20 and value[10] == "T" and value.endswith("Z"):
            record[key] = value[:-1]


def _resource_of(path: str) -> str:
    name = path.strip("/").removeprefix("v1/").strip("/")
    if name not in RESOURCES:
        raise ValueError(f"{path!r}: not a list path of this server ({', '.join('/' + r for r in RESOURCES)})")
    return name


_KOL_FLAT = ("id", "full_name", "title", "institution", "department", "specialties", "expertise_areas", "tags",
             "tier", "engagement_level", "email", "phone")


def _kol_list_item(r: dict[str, Any]) -> dict[str, Any]:
    """The flat list shape of spec 2.2: no is_archived, bio, notes, research_interests or social."""
    item = {k: r[k] for k in _KOL_FLAT}
    item["location"] = {"city": r["city"], "country": r["country"]}
    item["event_count"] = r["event_count"]
    item["last_interaction"] = r["last_interaction"]
    item["created_at"] = r["created_at"]
    item["updated_at"] = r["updated_at"]
    return item


def _kol_detail(r: dict[str, Any]) -> dict[str, Any]:
    """The detail shape of spec 2.2: email and phone under contact, no flat email, phone or location."""
    return {
        "id": r["id"], "full_name": r["full_name"], "title": r["title"], "institution": r["institution"],
        "department": r["department"], "bio": r["bio"],
        "specialties": r["specialties"], "expertise_areas": r["expertise_areas"],
        "research_interests": r["research_interests"], "tags": r["tags"],
        "tier": r["tier"], "engagement_level": r["engagement_level"],
        "contact": {"email": r["email"], "phone": r["phone"],
                    "address": {"street": r["street"], "city": r["city"], "state": r["state"],
                                "postal_code": r["postal_code"], "country": r["country"]}},
        "social": r["social"],
        "metrics": r["metrics"],
        "notes": r["notes"],
        "created_at": r["created_at"], "updated_at": r["updated_at"],
    }
