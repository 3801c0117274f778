"""Deterministic, realistic synthetic data for one organization (`commops service seed`).

    counts = seed(db_path, org_id, kols=200, campaigns=30, products=25, signals=150, events=40, random_seed=0)

Same random_seed, same organization and same starting state give the same rows: values
come from a `random.Random` seeded with (random_seed, rows the org already holds), ids
from a second one that also mixes in the org id (ids are global primary keys; within a
run they increase, see _Generator.id_bits), and
timestamps from the two years before a reference end: the start of the seeding day (UTC)
unless `reference_end` is given, so a fresh demo has last month's activity and two runs on
one day (or with one reference_end) write identical rows.
Seeding an organization that already has data adds more rows with fresh ids.

The defaults give a small dataset in which every enum value and every list filter of the
API has matches (the first rows of each resource cycle through the enum values).
Rows are generated in chunks and written with bulk SQL (service/store/seeding.py) by
service/seed_writer.py, from a child process beside the generation when the seed is LARGE;
they emit no webhook events: a seed is a bulk load, not activity. Derived KOL fields are then
computed by the same set-based metrics.refresh_kol_metrics the API uses. Memory stays flat:
a chunk at a time, and about 20 bytes for each KOL written (see _Kols).
"""

from __future__ import annotations

import json
import math
import random
import re
import sqlite3
import unicodedata
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from commops_spec.constants import (
    CAMPAIGN_STATUSES,
    CAMPAIGN_TYPES,
    ENGAGEMENT_LEVELS,
    ID_PREFIXES,
    IMPACT_LEVELS,
    KOL_TIERS,
    MARKETS,
    PRODUCT_STATUSES,
    SENTIMENTS,
    SIGNAL_SOURCES,
)
from service import seed_vocab as V
from service.seed_writer import Writer, open_writer
from service.store import db, seeding

Progress = Callable[[str, int, int], None]

WINDOW = timedelta(days=730)  # the seeded past: the two years before the reference end
_WINDOW_US = int(WINDOW.total_seconds() * 1_000_000)
# The first campaigns (one per status) and signals (two per impact level, each about a product)
# fall in the 29 days before the reference end (so within 30 days of any moment of the seeding
# day): a fresh dataset always has recent activity, and docs/analysts.md's "last 30 days" query
# always has rows.
RECENT = timedelta(days=29)
_RECENT_CAMPAIGNS = len(CAMPAIGN_STATUSES)
_RECENT_SIGNALS = 2 * len(IMPACT_LEVELS)
_KOL_CHUNK = 10_000
LARGE = 20_000  # KOLs and signals from which a child process writes beside the generation (service/seed_writer.py)
_CAMPAIGN_CHUNK = 1_000
_SIGNAL_CHUNK = 10_000

# Rows written, per table, in the order the seed command prints them: resources, then related data.
_COUNTED = ("kols", "campaigns", "products", "signals", "events", "product_lines", "event_attendees",
            "interactions", "publications", "campaign_recipients", "signal_products")
_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SPEC_NUMBER = re.compile(r"\{n(\d+)\}")


def reference_end_for(moment: datetime) -> datetime:
    """The reference end of a seed run at `moment`: the start of its UTC day, so that every run
    of one day with the same random_seed writes the same rows."""
    return _naive_utc(moment).replace(hour=0, minute=0, second=0, microsecond=0)


def _naive_utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)


def seed(
    db_path: str | Path,
    org_id: str,
    *,
    kols: int = 200,
    campaigns: int = 30,
    products: int = 25,
    signals: int = 150,
    events: int = 40,
    random_seed: int = 0,
    reference_end: datetime | None = None,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Write synthetic data for `org_id` into the service database; return the rows written per table.

    Generated dates fall in the two years before `reference_end` (naive UTC; default: the start
    of today, UTC, see reference_end_for), scheduled events and campaigns up to 180 days after it.
    """
    for name, value in (("kols", kols), ("campaigns", campaigns), ("products", products),
                        ("signals", signals), ("events", events)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    db.init_db(db_path)
    conn = db.connect(db_path)
    try:
        seeding.tune_for_bulk_load(conn)
        if not seeding.org_exists(conn, org_id):
            raise ValueError(f"organization {org_id!r} does not exist in {db_path}; create it first (create-org)")
        end = reference_end_for(datetime.now(UTC)) if reference_end is None else _naive_utc(reference_end)
        with open_writer(db_path, large=kols + signals >= LARGE) as writer:
            gen = _Generator(conn, writer, org_id, random_seed, end, progress or (lambda *_: None))
            gen.write_products(products)
            gen.write_events(events)
            gen.write_kols(kols)
            gen.write_campaigns(campaigns)
            gen.write_signals(signals)
            gen.refresh_derived_fields()
        return dict(gen.counts)
    finally:
        conn.close()


class _FastRandom(random.Random):
    """Integer draws from one random() call (53 bits) instead of exact rejection sampling:
    several times faster, with a bias far below anything synthetic data could show."""

    def _randbelow(self, n: int) -> int:
        return int(self.random() * n)

    def choice(self, seq):
        return seq[int(self.random() * len(seq))]

    def randint(self, a: int, b: int) -> int:
        return a + int(self.random() * (b - a + 1))

    def below(self, n: int) -> int:
        """The index choice() would pick from a sequence of n items."""
        return int(self.random() * n)


class _Kols:
    """What later stages need to know about the KOLs this run wrote, a few bytes each (a million
    KOLs take about 20 MB): id, email (its name-and-domain key and number, see _Emails),
    engagement propensity, and the positions of the active ones (campaign audiences)."""

    def __init__(self) -> None:
        self.id_bits, self.email_keys, self.email_numbers = array("Q"), array("I"), array("I")
        self.propensities = array("b")  # index into ENGAGEMENT_LEVELS: 0 high, 1 medium, 2 low
        self.active = array("I")

    def add(self, id_bits: int, email_key: int, email_number: int, propensity: int, archived: bool) -> None:
        if not archived:
            self.active.append(len(self.id_bits))
        self.id_bits.append(id_bits)
        self.email_keys.append(email_key)
        self.email_numbers.append(email_number)
        self.propensities.append(propensity)

    def __len__(self) -> int:
        return len(self.id_bits)

    def id(self, position: int) -> str:
        return _kol_id(self.id_bits[position])

    def email(self, position: int) -> str:
        return _Emails.address(self.email_keys[position], self.email_numbers[position])


class _Emails:
    """Unique KOL emails, first.last@domain, then first.last2@domain, ...: the number each
    (first name, last name, domain) took last, in one array, and the organization's emails
    from before this run (a seed adds to them)."""

    def __init__(self, existing: set[str]):
        self.existing = existing
        self.last_number = array("I", bytes(4 * len(_FIRST_SLUGS) * len(_LAST_SLUGS) * len(_DOMAINS)))

    @staticmethod
    def key(first: int, last: int, domain: int) -> int:
        return (first * len(_LAST_SLUGS) + last) * len(_DOMAINS) + domain

    @staticmethod
    def address(key: int, number: int) -> str:
        names, domain = divmod(key, len(_DOMAINS))
        first, last = divmod(names, len(_LAST_SLUGS))
        return f"{_FIRST_SLUGS[first]}.{_LAST_SLUGS[last]}{number if number > 1 else ''}@{_DOMAINS[domain]}"

    def take(self, key: int) -> int:
        """The number of the next free address of `key`."""
        number = self.last_number[key] + 1
        while self.existing and self.address(key, number) in self.existing:
            number += 1
        self.last_number[key] = number
        return number


@dataclass
class _Event:
    id: str
    date: str
    status: str


class _Generator:
    """Generates and writes one seed run; later stages draw on what earlier ones wrote."""

    def __init__(self, conn: sqlite3.Connection, writer: Writer, org_id: str, random_seed: int, end: datetime,
                 progress: Progress):
        self.conn = conn  # reads what the organization holds already
        self.writer = writer
        self.end = end  # naive UTC; every generated date is placed relative to it
        self.start = end - WINDOW
        self.org_id = org_id
        self.progress = progress
        self.counts = dict.fromkeys(_COUNTED, 0)
        existing = seeding.existing_row_count(conn, org_id)
        self.rng = _FastRandom(f"commops-seed:{random_seed}:{existing}")
        self._id_rng = random.Random(f"commops-seed-ids:{random_seed}:{org_id}:{existing}")
        self._last_id = self._id_rng.getrandbits(63)
        self.emails = _Emails(seeding.existing_emails(self.conn, self.org_id))
        self.products = product_refs(self.conn, self.org_id)
        self.product_names = {name for _, name, _ in self.products}
        # per family: names of the catalog, and brand-and-generation names not yet taken
        self.family_names = {family: sum(name.endswith(f" {family}") for name in self.product_names)
                             for family in _FAMILY_CATEGORY}
        self.base_names_left = {family: sum(f"{brand}{generation} {family}" not in self.product_names
                                            for brand in V.BRAND_STEMS for generation in _GENERATIONS)
                                for family in _FAMILY_CATEGORY}
        self.lines = seeding.existing_product_lines(self.conn, self.org_id)
        self.kols = _Kols()
        self.events: list[_Event] = []

    # ---- small helpers -------------------------------------------------------------

    def id_bits(self) -> int:
        """The next id's 64 bits: a random start, then random steps up. Each id index then grows at
        its end: random ids put every insert on a random page of a large index, which took a
        million KOLs past five minutes. Steps of up to 2**20 from below 2**63 never reach 2**64."""
        self._last_id += 1 + self._id_rng.getrandbits(20)
        return self._last_id

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{self.id_bits():016x}"

    def moment(self, start: datetime | None = None, end: datetime | None = None) -> datetime:
        start, end = start or self.start, end or self.end
        span = int((end - start).total_seconds() * 1_000_000)
        return start + timedelta(microseconds=self.rng.randrange(max(span, 1)))

    def past_moment(self) -> datetime:
        return self.start + timedelta(microseconds=self.rng.randrange(_WINDOW_US))

    def write(self, batch: dict[str, list[tuple]]) -> None:
        """Hand one chunk (rows per table, written together) to the writer."""
        for table, rows in batch.items():
            batch[table] = seeding.complete(table, rows)
            self.counts[table] += len(rows)
        self.writer.write(batch)

    # ---- products --------------------------------------------------------------------

    def write_products(self, n: int) -> None:
        rng = self.rng
        line_names = list(V.PRODUCT_LINES)
        new_lines: list[tuple] = []
        rows: list[tuple] = []
        for i in range(n):
            line_name = line_names[i % len(line_names)]
            family, category, specs = rng.choice(V.PRODUCT_LINES[line_name])
            if line_name not in self.lines:
                self.lines[line_name] = self.new_id(ID_PREFIXES["product_line"])
                new_lines.append((self.lines[line_name], self.org_id, line_name))
            name = self._product_name(family)
            status = PRODUCT_STATUSES[i] if i < len(PRODUCT_STATUSES) else rng.choices(
                PRODUCT_STATUSES, weights=(60, 25, 15))[0]
            markets = self._target_markets(i)
            market_status = self._market_status(markets, status, family)
            features = rng.sample(V.FEATURES, 3)
            created = self.past_moment()
            updated = self.moment(created)
            product_id = self.new_id(ID_PREFIXES["product"])
            brand = name.split(" ")[0]
            rows.append((
                product_id, self.org_id, name,
                f"{brand} {category} by {rng.choice(V.COMPANIES)}: {features[0].lower()} and "
                f"{features[1].lower()}, designed for {rng.choice(('routine', 'complex', 'high-risk'))} cases.",
                self.lines[line_name], status, _regulatory_status(market_status, status),
                _DUMPS(markets), _DUMPS(features),
                _DUMPS([{"name": k, "value": self._spec_value(v)} for k, v in specs]),
                _DUMPS(market_status), _iso(created), _iso(updated),
            ))
            self.products.append((product_id, name, category))
        self.write({"product_lines": new_lines, "products": rows})
        self.progress("products", n, n)

    def _product_name(self, family: str) -> str:
        """A name not yet in the catalog: brand and generation ("Aurex Pro Insulin Pump") while
        the family has such names left, then brand and model code ("Aurex G12 Insulin Pump")."""
        if self.base_names_left[family]:
            self.base_names_left[family] -= 1
            while True:  # a free name exists, so this ends
                name = f"{self.rng.choice(V.BRAND_STEMS)}{self.rng.choice(_GENERATIONS)} {family}"
                if name not in self.product_names:
                    break
        else:
            name = self._model_name(family)
        self.product_names.add(name)
        self.family_names[family] += 1
        return name

    def _model_name(self, family: str) -> str:
        """A random free name of the family's model-code space, sized at least twice the names the
        family already has: a random draw then probes on to the next free name, in a few steps."""
        size = len(_MODEL_CODES) * math.ceil(2 * (self.family_names[family] + 1) / len(_MODEL_CODES))
        index = self.rng.randrange(size)
        while (name := _model_name(index, family)) in self.product_names:
            index = (index + 1) % size
        return name

    def _target_markets(self, i: int) -> list[str]:
        rng = self.rng
        markets = [m for m, p in zip(MARKETS, (0.85, 0.8, 0.35, 0.3, 0.25), strict=True) if rng.random() < p]
        must = MARKETS[i % len(MARKETS)]  # the first products cover every market
        if must not in markets:
            markets.append(must)
        return [m for m in MARKETS if m in markets]

    def _market_status(self, markets: list[str], status: str, family: str) -> dict[str, dict]:
        rng = self.rng
        result: dict[str, dict] = {}
        for market in markets:
            approved = status != "in_development" and (market == markets[0] or rng.random() < 0.8)
            entry: dict[str, object] = {"status": "approved" if approved else "under_review"}
            if market == "EU":
                entry["ce_mark"] = approved
            elif approved:
                entry["clearance_number"] = self._clearance_number(market, family)
            result[market] = entry
        return result

    def _clearance_number(self, market: str, family: str) -> str:
        rng = self.rng
        year = rng.randint(self.end.year - 8, self.end.year) % 100
        if market == "US":
            pma = any(word in family for word in ("TAVR", "Defibrillator", "Leadless", "Deep Brain", "Mitral"))
            return f"P{year:02d}{rng.randint(0, 9999):04d}" if pma else f"K{year:02d}{rng.randint(0, 9999):04d}"
        if market == "CN":
            return f"NMPA 20{year:02d}3{rng.randint(100, 999)}{rng.randint(100, 999)}"
        if market == "JP":
            return f"{rng.randint(220, 308)}00BZX00{rng.randint(100, 999)}000"
        return f"MD-{rng.choice(('IMP', 'MFG'))}-20{year:02d}-{rng.randint(1, 9999):06d}"

    def _spec_value(self, template: str) -> str:
        return _SPEC_NUMBER.sub(lambda m: str(self.rng.randint(max(1, int(m[1]) // 2), int(m[1]))), template)

    # ---- events ----------------------------------------------------------------------

    def write_events(self, n: int) -> None:
        rng = self.rng
        rows: list[tuple] = []
        for i in range(n):
            kind = V.EVENT_TYPES[i % len(V.EVENT_TYPES)] if i < 10 else rng.choice(V.EVENT_TYPES)
            start = self.moment(self.start, self.end + timedelta(days=180))
            day = start.date()
            past = start < self.end
            status = ("completed" if past else "scheduled") if rng.random() > 0.08 else "cancelled"
            if i < 3:  # the first events cover every status
                status = ("completed", "scheduled", "cancelled")[i]
                day = (self.end + timedelta(days=(-90, 45, -20)[i])).date()
            topic = rng.choice(V.EVENT_TOPICS)
            inst = rng.choice(V.INSTITUTIONS)
            if kind == "congress":
                congress, city, country = rng.choice(V.CONGRESSES)
                name = f"{congress} {day.year}"
            elif kind == "webinar":
                name, city, country = f"Webinar: {topic}", None, None
            elif kind == "advisory_board":
                name, city, country = f"Advisory Board: {topic}", inst[1], inst[5]
            elif kind == "dinner_meeting":
                name, city, country = f"{_sentence_case(topic)} Dinner Meeting – {inst[1]}", inst[1], inst[5]
            else:
                name, city, country = f"Hands-on Workshop: {topic}", inst[1], inst[5]
            created = datetime(day.year, day.month, day.day, 9) - timedelta(
                days=rng.randint(30, 200), seconds=rng.randint(0, 86_399))
            updated = created + timedelta(days=rng.randint(0, 25), seconds=rng.randint(0, 86_399))
            event_id = self.new_id("evt_")
            rows.append((event_id, self.org_id, name, kind, day.isoformat(), city, country, status,
                         _iso(created), _iso(updated)))
            self.events.append(_Event(event_id, day.isoformat(), status))
        self.write({"events": rows})
        self.progress("events", n, n)

    # ---- KOLs and their activity -------------------------------------------------------

    def write_kols(self, n: int) -> None:
        completed = [e for e in self.events if e.status == "completed"]
        other = [e for e in self.events if e.status != "completed"]
        self._write_in_chunks("kols", n, _KOL_CHUNK, ("kols", "event_attendees", "interactions", "publications"),
                              lambda i, batch: self._kol(i, batch, completed, other))

    def _write_in_chunks(self, label: str, n: int, chunk: int, tables: tuple[str, ...],
                         add: Callable[[int, dict[str, list]], None]) -> None:
        """add(i, batch) for i in range(n) into batches of `chunk` rows: one write and one progress line each."""
        for start in range(0, n, chunk):
            end = min(n, start + chunk)
            batch: dict[str, list] = {table: [] for table in tables}
            for i in range(start, end):
                add(i, batch)
            self.write(batch)
            self.progress(label, end, n)

    def _kol(self, i: int, batch: dict[str, list], completed: list[_Event], other: list[_Event]) -> None:
        rng = self.rng
        if i < 9:  # the first KOLs cover every tier x engagement level
            tier, propensity = KOL_TIERS[i % 3], i // 3
        else:
            tier = rng.choices(KOL_TIERS, weights=(12, 30, 58))[0]
            propensity = rng.choices((0, 1, 2), weights=((45, 40, 15), (25, 45, 30), (10, 35, 55))[
                KOL_TIERS.index(tier)])[0]
        archived = i % 20 == 19
        first_index, last_index = rng.below(len(V.FIRST_NAMES)), rng.below(len(V.LAST_NAMES))
        first, last = V.FIRST_NAMES[first_index], V.LAST_NAMES[last_index]
        full_name = f"{first} {last}"
        inst = rng.choice(V.INSTITUTIONS)
        inst_name, city, state, postal, street, country, domain, phone_prefix = inst
        specialty = rng.choice(_SPECIALTY_KEYS)
        specialties = [specialty]
        if rng.random() < 0.3:
            second = rng.choice(_SPECIALTY_KEYS)
            if second != specialty:
                specialties.append(second)
        departments, expertise, research, role = V.SPECIALTIES[specialty]
        department = rng.choice(departments)
        title = rng.choices(_TITLE_TEMPLATES, weights=_TITLE_WEIGHTS)[0].format(dept=department, role=role)
        expertise_areas = rng.sample(expertise, min(len(expertise), rng.randint(2, 3)))
        research_interests = rng.sample(research, min(len(research), rng.randint(1, 2)))
        email_key = _Emails.key(first_index, last_index, _DOMAIN_INDEX[domain])
        email_number = self.emails.take(email_key)
        email = _Emails.address(email_key, email_number)
        tags = rng.sample(V.TAGS, rng.choice((0, 1, 1, 2, 2, 3))) if i >= len(V.TAGS) else [V.TAGS[i]]
        created = self.past_moment()
        updated = self.moment(created)
        id_bits = self.id_bits()
        kol_id = _kol_id(id_bits)
        n_pubs = rng.randint(*((4, 20), (1, 6), (0, 2))[KOL_TIERS.index(tier)])
        bio = (f"{full_name} is a {role.lower()} at {inst_name} ({department}) whose clinical work focuses on "
               f"{expertise_areas[0]}. Research interests include {', '.join(research_interests)}; "
               f"author of {n_pubs} indexed publications.")
        batch["kols"].append((
            kol_id, self.org_id, full_name, title, inst_name, department, _DUMPS(specialties),
            _DUMPS(expertise_areas), _DUMPS(research_interests), tier, email, email,
            f"{phone_prefix} {rng.randint(100, 999)} {rng.randint(1000, 9999)}", street, city, state, postal,
            country, bio, rng.choice(V.NOTES) if rng.random() < 0.25 else None, _DUMPS(tags),
            f"https://www.linkedin.com/in/{_SLUG[first]}-{_SLUG[last]}-{rng.randint(1000, 99999)}"
            if rng.random() < 0.7 else None,
            f"@dr{_SLUG[last]}{rng.randint(1, 99)}" if rng.random() < 0.35 else None,
            1 if archived else 0, _iso(created), _iso(updated),
        ))
        self.kols.add(id_bits, email_key, email_number, propensity, archived)
        n_events, n_interactions = self._activity_counts(propensity, len(completed))
        self._attendance(kol_id, tier, n_events, completed, other, batch["event_attendees"])
        self._interactions(kol_id, created, n_interactions, propensity, batch["interactions"])
        self._publications(kol_id, research_interests, n_pubs, batch["publications"])

    def _activity_counts(self, propensity: int, available_events: int) -> tuple[int, int]:
        """Attended events and interactions that put the engagement score (see metrics.py:
        3 * events + 2 * interactions + 10 * open rate) in the band of the KOL's propensity."""
        rng = self.rng
        if propensity == 0:  # high: base score >= 20 on its own
            n_events = min(rng.randint(3, 7), available_events)
            return n_events, max(rng.randint(2, 6), math.ceil((20 - 3 * n_events) / 2))
        if propensity == 1:  # medium: base 8 or 9, and at most +10 from opens
            n_events = min(rng.randint(0, 2), available_events)
            return n_events, math.ceil((8 - 3 * n_events) / 2)
        n_events = min(rng.randint(0, 1), available_events)  # low: base <= 5, and never opens
        return n_events, rng.randint(0, 1)

    def _attendance(self, kol_id: str, tier: str, n_events: int, completed: list[_Event],
                    other: list[_Event], rows: list[tuple]) -> None:
        rng = self.rng
        speaking = ("speaker", "moderator", "panelist", "chair")
        for event in rng.sample(completed, n_events):
            role = rng.choice(speaking) if tier == "tier_1" and rng.random() < 0.6 else (
                rng.choice(speaking) if rng.random() < 0.15 else "attendee")
            rows.append((event.id, kol_id, self.org_id, role, "accepted", 1, event.date + "T18:00:00.000000Z"))
        if other and rng.random() < 0.3:
            for event in rng.sample(other, min(len(other), rng.randint(1, 2))):
                rsvp = "declined" if event.status == "cancelled" else rng.choice(V.RSVP_STATUSES)
                rows.append((event.id, kol_id, self.org_id, rng.choice(V.ATTENDEE_ROLES), rsvp, 0,
                             _iso(self.moment())))

    def _interactions(self, kol_id: str, created: datetime, n: int, propensity: int, rows: list[tuple]) -> None:
        rng = self.rng
        for _ in range(n):
            kind = rng.choice(V.INTERACTION_TYPES)
            rows.append((
                self.new_id("int_"), self.org_id, kol_id, kind, _iso(self.moment(created)),
                _INTERACTION_SUMMARIES[kind].format(topic=rng.choice(V.EVENT_TOPICS)),
                1 if rng.random() < (0.85, 0.6, 0.3)[propensity] else 0,
            ))

    def _publications(self, kol_id: str, interests: list[str], n: int, rows: list[tuple]) -> None:
        rng = self.rng
        for _ in range(n):
            year = rng.randint(self.end.year - 18, self.end.year)
            journal, doi_prefix = rng.choice(_JOURNALS)
            rows.append((
                self.new_id("pub_"), self.org_id, kol_id,
                rng.choice(_PUB_TITLES).format(topic=rng.choice(interests)), journal, year,
                min(2000, int(rng.paretovariate(1.3) * (self.end.year + 1 - year))),
                f"{doi_prefix}.{year}.{rng.randint(1, 12):02d}.{rng.randint(1000, 99999)}",
            ))

    # ---- campaigns ---------------------------------------------------------------------

    def write_campaigns(self, n: int) -> None:
        self._write_in_chunks("campaigns", n, _CAMPAIGN_CHUNK, ("campaigns", "campaign_recipients"), self._campaign)

    def _campaign(self, i: int, batch: dict[str, list]) -> None:
        rng = self.rng
        ctype = CAMPAIGN_TYPES[i % len(CAMPAIGN_TYPES)] if i < 20 else rng.choices(
            CAMPAIGN_TYPES, weights=(25, 20, 15, 30, 10))[0]
        status = CAMPAIGN_STATUSES[i % len(CAMPAIGN_STATUSES)] if i < 20 else rng.choices(
            CAMPAIGN_STATUSES, weights=(20, 20, 10, 50))[0]
        product = rng.choice(self.products) if self.products else None
        product_name = product[1] if product else "our portfolio"
        topic = rng.choice(V.EVENT_TOPICS)
        congress = rng.choice(V.CONGRESSES)[0]
        created = self.moment(self.end - RECENT) if i < _RECENT_CAMPAIGNS else self.past_moment()
        sent = None if status == "draft" else min(created + timedelta(hours=rng.randint(1, 240)), self.end)
        schedule = self._schedule(ctype, status, created, sent)
        subject = _fill(rng.choice(V.CAMPAIGN_SUBJECTS[ctype]), product=product_name, congress=congress, topic=topic)
        name = {
            "product_update": f"{product_name} – clinical update",
            "event_invitation": f"{congress} {created.year} symposium invitation",
            "new_product_launch": f"{product_name} launch – {rng.choice(('EU', 'US', 'APAC', 'Global'))}",
            "newsletter": f"{_sentence_case(topic)} newsletter – Q{(created.month - 1) // 3 + 1} {created.year}",
            "custom": f"Follow-up: {topic}",
        }[ctype]
        pool = self.kols.active  # drawn as positions: the same draws as from a list of the active KOLs
        members = [pool[j] for j in rng.sample(range(len(pool)), min(len(pool), int(rng.triangular(5, 120, 15))))
                   ] if pool else []
        external = [f"{rng.choice(('cathlab', 'research', 'education', 'procurement'))}.office@{inst[6]}"
                    for inst in rng.sample(V.INSTITUTIONS, rng.choice((0, 0, 0, 1, 2)))]
        if not members and not external:
            external = [f"medical.affairs@{rng.choice(V.INSTITUTIONS)[6]}"]
        campaign_id = self.new_id(ID_PREFIXES["campaign"])
        recipients = self._recipients(campaign_id, members, external, sent)
        batch["campaign_recipients"].extend(recipients)
        audience = {"kol_ids": [self.kols.id(k) for k in members]}
        if external:
            audience["external_contacts"] = external
        email = {
            "subject": subject,
            "body_html": "<p>Dear {{full_name}},</p><p>" + _fill(_CAMPAIGN_BODIES[ctype], product=product_name,
                                                                 congress=congress, topic=topic) + "</p>",
            "from_name": rng.choice(V.FROM_NAMES),
            "reply_to": "medical.affairs@commops.example",
            "body_text": "Dear {{full_name}},\n\n" + _fill(_CAMPAIGN_BODIES[ctype], product=product_name,
                                                            congress=congress, topic=topic),
        }
        updated = max(created, sent or created) + timedelta(minutes=rng.randint(0, 600))
        batch["campaigns"].append((
            campaign_id, self.org_id, name, f"{ctype.replace('_', ' ').capitalize()} campaign on {topic}.",
            ctype, status, _DUMPS(audience), _DUMPS(email),
            _DUMPS([product[0]] if product and ctype in ("product_update", "new_product_launch") else []),
            _DUMPS(schedule), len(recipients), _iso(created), _iso(updated), _iso(sent) if sent else None,
        ))

    def _schedule(self, ctype: str, status: str, created: datetime, sent: datetime | None) -> dict:
        roll = self.rng.random()
        if ctype == "newsletter" and roll < 0.5:
            return {"type": "recurring", "send_at": _iso(sent or created + timedelta(days=7)), "frequency": "monthly"}
        if roll < 0.3:
            at = sent or self.end + timedelta(days=self.rng.randint(30, 120))
            return {"type": "scheduled", "send_at": _iso(at)}
        return {"type": "immediate", "send_at": None}

    def _recipients(self, campaign_id: str, members: list[int], external: list[str],
                    sent: datetime | None) -> list[tuple]:
        sent_iso = _iso(sent) if sent else None
        kols = self.kols
        rows = [self._delivery(campaign_id, kols.email(k), kols.id(k), sent, sent_iso,
                               _OPEN_PROBABILITY[kols.propensities[k]]) for k in members]
        rows += [self._delivery(campaign_id, address, None, sent, sent_iso, 0.3) for address in dict.fromkeys(external)]
        return rows

    def _delivery(self, campaign_id: str, email: str, kol_id: str | None, sent: datetime | None,
                  sent_iso: str | None, open_p: float) -> tuple:
        if sent is None:
            return (campaign_id, email, self.org_id, kol_id, None, None, None, None)
        rng = self.rng
        if rng.random() > 0.97:  # bounced
            return (campaign_id, email, self.org_id, kol_id, sent_iso, None, None, None)
        delivered = sent + timedelta(seconds=rng.randint(1, 300))
        if rng.random() >= open_p:
            return (campaign_id, email, self.org_id, kol_id, sent_iso, _iso(delivered), None, None)
        opened = delivered + timedelta(seconds=rng.randint(60, 3 * 86_400))
        clicked = opened + timedelta(seconds=rng.randint(5, 900)) if rng.random() < 0.35 else None
        return (campaign_id, email, self.org_id, kol_id, sent_iso, _iso(delivered), _iso(opened),
                _iso(clicked) if clicked else None)

    # ---- signals -----------------------------------------------------------------------

    def write_signals(self, n: int) -> None:
        self._write_in_chunks("signals", n, _SIGNAL_CHUNK, ("signals", "signal_products"), self._signal)

    def _signal(self, i: int, batch: dict[str, list]) -> None:
        rng = self.rng
        if i < 24:  # the first signals cover every source, sentiment and impact level
            source, level = SIGNAL_SOURCES[i % len(SIGNAL_SOURCES)], IMPACT_LEVELS[i % len(IMPACT_LEVELS)]
            fields = signal_fields(rng, self.products, source=source, sentiment=SENTIMENTS[i % 3], level=level,
                                   min_related=1 if i < _RECENT_SIGNALS else 0)
            read, bookmarked = (i % 2 == 0, i % 4 < 2)
        else:
            fields = signal_fields(rng, self.products)
            read, bookmarked = rng.random() < 0.45, rng.random() < 0.12
        published = self.moment(self.end - RECENT) if i < _RECENT_SIGNALS else self.past_moment()
        fetched = published + timedelta(minutes=rng.randint(5, 360))
        signal_id = self.new_id(ID_PREFIXES["signal"])
        source, impact, relevance = fields["source"], fields["impact"], fields["product_relevance"]
        batch["signals"].append((
            signal_id, self.org_id, fields["title"], f"{fields['url']}-{signal_id[-6:]}", fields["source_key"],
            source["name"], source["country"], source["region"], fields["content"], fields["ai_summary"],
            impact["level"], impact["score"], _DUMPS(impact["categories"]), fields["sentiment"],
            _DUMPS(relevance), int(read), int(bookmarked), _iso(published), _iso(fetched), _iso(fetched),
        ))
        batch["signal_products"].extend((signal_id, r["product_id"], self.org_id) for r in relevance)

    # ---- derived fields ----------------------------------------------------------------

    def refresh_derived_fields(self) -> None:
        n = len(self.kols)
        for start in range(0, n, _KOL_CHUNK):
            self.writer.refresh([_kol_id(bits) for bits in self.kols.id_bits[start:start + _KOL_CHUNK]])
            self.progress("derived KOL fields", min(n, start + _KOL_CHUNK), n)


def product_refs(conn: sqlite3.Connection, org_id: str) -> list[tuple[str, str, str]]:
    """(id, name, device category) of the organization's products, for signal relevance."""
    refs = []
    for product_id, name, _line in seeding.existing_products(conn, org_id):
        category = next((c for family, c in _FAMILY_CATEGORY.items() if name.endswith(family)), name)
        refs.append((product_id, name, category))
    return refs


def signal_fields(
    rng: random.Random,
    products: list[tuple[str, str, str]],
    *,
    source: str | None = None,
    sentiment: str | None = None,
    level: str | None = None,
    min_related: int = 0,
) -> dict:
    """A plausible regulatory or industry signal in the shape signals.ingest_signal takes
    (without id and timestamps). `products` holds (id, name, category) to relate it to;
    source, sentiment and level may be forced (the seed's first rows cover every value), and
    `min_related` products (when there are products) related."""
    source = source or rng.choices(SIGNAL_SOURCES, weights=(30, 12, 10, 8, 6, 8, 8, 18))[0]
    templates = _TITLES_BY_SOURCE[source]
    if sentiment is not None:
        template, sentiment, base_level = next((t for t in templates if t[1] == sentiment), rng.choice(templates))
    else:
        template, sentiment, base_level = rng.choice(templates)
    level = level or _shift_level(base_level, rng.choices((-1, 0, 1), weights=(20, 60, 20))[0])
    wanted = max(min_related, rng.choice((0, 1, 1, 1, 2, 3))) if products else 0
    related = rng.sample(products, min(len(products), wanted)) if products else []
    category = related[0][2] if related else rng.choice(_CATEGORIES)
    values = {
        "company": rng.choice(V.COMPANIES), "category": category, "issue": rng.choice(V.SIGNAL_ISSUES),
        "product": related[0][1] if related else f"{rng.choice(V.BRAND_STEMS)} {category}",
        "feature": rng.choice(V.FEATURES).lower(),
    }
    title = template.format(**values)
    src_name, src_country, src_region, url_base = V.SIGNAL_SOURCES[source]
    lo, hi = _SCORE_BANDS[level]
    categories = rng.sample(V.IMPACT_CATEGORIES, rng.randint(1, 3))
    relevance = sorted(
        ({"product_id": pid, "product_name": pname, "relevance_type": rng.choice(V.RELEVANCE_TYPES),
          "relevance_score": round(rng.uniform(0.3, 0.99), 2)} for pid, pname, _ in related),
        key=lambda r: -r["relevance_score"],
    )
    return {
        "title": title,
        "url": f"{url_base}{_url_slug(title)}",
        "source_key": source,
        "source": {"name": src_name, "country": src_country, "region": src_region},
        "content": (f"{title}. {_CONTENT_BODY[sentiment].format(**values)} The notice was published by the "
                    f"{src_name} ({src_country}) and applies to the {src_region} region. Manufacturers with "
                    f"products in the {category} category should review their labeling, post-market "
                    f"surveillance plans and field actions accordingly."),
        "ai_summary": (f"{src_name} item on {category}s ({', '.join(categories)}); assessed as {level} impact"
                       f"{' for ' + related[0][1] if related else ''}."),
        "impact": {"level": level, "score": round(rng.uniform(lo, hi), 1), "categories": categories},
        "sentiment": sentiment,
        "product_relevance": relevance,
    }


def _fill(template: str, **values: str) -> str:
    """Replace {name} placeholders, leaving the {{variable}} personalization tokens intact."""
    for key, value in values.items():
        template = template.replace("{{" + key + "}}", "\0").replace("{" + key + "}", value).replace(
            "\0", "{{" + key + "}}")
    return template


def _sentence_case(text: str) -> str:
    """Upper-case the first letter only ("TAVR durability" stays as is, unlike str.capitalize)."""
    return text[:1].upper() + text[1:]


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds") + "Z"


def _ascii_slug(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.replace("ß", "ss")).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]", "", folded.lower())


def _url_slug(title: str) -> str:
    folded = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", folded).strip("-")[:80]


def _regulatory_status(market_status: dict[str, dict], status: str) -> str:
    """The free-text primary status, e.g. "FDA 510(k) cleared (K231234); CE marked under EU MDR"."""
    parts = []
    us, eu = market_status.get("US"), market_status.get("EU")
    if us:
        number = us.get("clearance_number", "")
        kind = "PMA approved" if number.startswith("P") else "510(k) cleared"
        parts.append(f"FDA {kind} ({number})" if us["status"] == "approved" else "FDA submission under review")
    if eu:
        parts.append("CE marked under EU MDR" if eu["ce_mark"] else "EU MDR conformity assessment ongoing")
    others = [m for m, v in market_status.items() if m not in ("US", "EU") and v["status"] == "approved"]
    if others:
        parts.append(f"approved in {', '.join(others)}")
    text = "; ".join(parts) or "regulatory submissions in preparation"
    return f"Discontinued; previously {text[0].lower()}{text[1:]}" if status == "discontinued" else text


def _shift_level(level: str, step: int) -> str:
    index = min(max(IMPACT_LEVELS.index(level) + step, 0), len(IMPACT_LEVELS) - 1)
    return IMPACT_LEVELS[index]


_GENERATIONS = ("", " 2", " 3", " X", " Pro", " Ultra", " Evo", " Neo", " 4", " Elite")
_MODEL_SERIES = ("G", "X", "S", "M", "AV", "LX")
_MODEL_CODES = tuple((brand, series) for brand in V.BRAND_STEMS for series in _MODEL_SERIES)


def _model_name(index: int, family: str) -> str:
    """The index-th name of a family's model-code space: every brand and series at model 2, then at 3, ..."""
    number, code = divmod(index, len(_MODEL_CODES))
    brand, series = _MODEL_CODES[code]
    return f"{brand} {series}{number + 2} {family}"


_SLUG = {name: _ascii_slug(name) for name in V.FIRST_NAMES + V.LAST_NAMES}
_FIRST_SLUGS = tuple(_SLUG[name] for name in V.FIRST_NAMES)
_LAST_SLUGS = tuple(_SLUG[name] for name in V.LAST_NAMES)
_DOMAINS = tuple(dict.fromkeys(inst[6] for inst in V.INSTITUTIONS))
_DOMAIN_INDEX = {domain: i for i, domain in enumerate(_DOMAINS)}
assert all(domain == domain.lower() for domain in _DOMAINS)  # addresses are lower-case as written (email_lower)


def _kol_id(bits: int) -> str:
    return f"{ID_PREFIXES['kol']}{bits:016x}"
_SPECIALTY_KEYS = tuple(V.SPECIALTIES)
_TITLE_TEMPLATES = tuple(t for t, _ in V.ACADEMIC_TITLES)
_TITLE_WEIGHTS = tuple(w for _, w in V.ACADEMIC_TITLES)
_FAMILY_CATEGORY = {f: c for families in V.PRODUCT_LINES.values() for f, c, _ in families}
_CATEGORIES = tuple(c for families in V.PRODUCT_LINES.values() for _, c, _ in families)
_OPEN_PROBABILITY = (0.6, 0.35, 0.0)  # by propensity; low-engagement KOLs never open (see _activity_counts)
_SCORE_BANDS = {"critical": (85.0, 100.0), "high": (65.0, 84.9), "medium": (35.0, 64.9), "low": (3.0, 34.9)}
assert tuple(_SCORE_BANDS) == IMPACT_LEVELS and ENGAGEMENT_LEVELS == ("high", "medium", "low")


def _title_traits(template: str) -> tuple[str, str]:
    """Sentiment and typical impact level a headline of this kind carries."""
    lowered = template.lower()
    if any(w in lowered for w in ("recall", "safety", "field safety")):
        return "negative", "high"
    if any(w in lowered for w in ("competitor", "acquires", "procurement", "capacity")):
        return "negative", "medium"
    if any(w in lowered for w in ("clears", "approves", "grants", "issues medical device licence", "lists",
                                  "extends", "payment code", "reimbursement price", "trial results")):
        return "positive", "medium"
    return "neutral", "low"


_TITLES_BY_SOURCE = {
    source: tuple((t, *_title_traits(t)) for t in titles) for source, titles in V.SIGNAL_TITLES.items()
}
_CONTENT_BODY = {
    "negative": "The action concerns {category}s affected by {issue}; affected units are to be quarantined "
                "and customers notified. {company} has started a field safety corrective action.",
    "neutral": "The document sets out expectations for {category}s and invites comments from manufacturers "
               "and notified bodies within the consultation period.",
    "positive": "The decision covers the {company} {category} and expands the options available to "
                "clinicians; {company} expects commercial availability within the next quarter.",
}
_INTERACTION_SUMMARIES = {
    "meeting": "On-site meeting to discuss {topic} and upcoming trial data.",
    "call": "Call about {topic}; follow-up material requested.",
    "email": "Email exchange on {topic} publication reprints.",
    "congress_visit": "Booth visit at congress; interest in {topic}.",
    "advisory_input": "Advisory input on {topic} product roadmap.",
}
_CAMPAIGN_BODIES = {
    "product_update": "New clinical evidence and an updated instructions-for-use are available for {product}. "
                      "As a {{specialty}} specialist at {{institution}}, you may find the subgroup data relevant.",
    "event_invitation": "We would be delighted to welcome you at our {congress} symposium on {topic}. "
                        "Seats are limited; please reply to confirm your attendance.",
    "new_product_launch": "{product} is now available. Our clinical specialists can arrange an in-service "
                          "training at {{institution}}.",
    "newsletter": "This issue covers recent publications, guideline updates and congress highlights on {topic}.",
    "custom": "Thank you for your time during our recent discussion on {topic}. As promised, the requested "
              "material is attached.",
}
_PUB_TITLES = (
    "Long-term outcomes of {topic}: a multicenter registry",
    "{topic}: a randomized controlled trial",
    "Safety and efficacy of {topic} in elderly patients",
    "Real-world experience with {topic}: a single-center analysis",
    "Expert consensus statement on {topic}",
    "Cost-effectiveness of {topic} in routine practice",
)
_JOURNALS = (
    ("JACC: Cardiovascular Interventions", "10.1016/j.jcin"), ("EuroIntervention", "10.4244/EIJ"),
    ("Circulation", "10.1161/CIRCULATIONAHA"), ("European Heart Journal", "10.1093/eurheartj"),
    ("Heart Rhythm", "10.1016/j.hrthm"), ("Diabetes Care", "10.2337/dc"),
    ("Diabetes Technology & Therapeutics", "10.1089/dia"), ("The Journal of Arthroplasty", "10.1016/j.arth"),
    ("Spine", "10.1097/BRS"), ("Journal of Neurosurgery", "10.3171/JNS"),
    ("The Lancet", "10.1016/S0140-6736"), ("JAMA Cardiology", "10.1001/jamacardio"),
)
