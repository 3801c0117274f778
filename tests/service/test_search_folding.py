"""Search folds case for every script (not only ASCII), the same way on every list, and
databases created before the folded column existed are migrated on start.

Signals whose title and content fold like ASCII keep no folded copy and are searched
with LIKE on the raw fields (service/store/search.py): they must answer exactly as the
folded copy would."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from importlib import resources

import httpx
import pytest

from service.server import ServiceServer
from service.settings import ServiceSettings
from service.store import campaigns, kols, orgs, products, search, signals
from service.store.db import connect, init_db, transaction
from tests.service.conftest import bearer, data_of

PEOPLE = {
    # label: (full_name, institution, email)
    "zurich": ("Dr Anna Keller", "Universitätsspital Zürich", "anna.keller@usz.example"),
    "greek": ("Σωκράτης Παπαδόπουλος", "Ωνάσειο Καρδιοχειρουργικό Κέντρο", None),
    "cyrillic": ("Иван Иванов", "НМИЦ имени Алмазова", None),
    "strasse": ("Dr Jonas Weiß", "Klinik an der Hauptstraße", None),
    "decomposed": ("Zoe\u0301 Martin", "Hôpital Saint-Louis", None),  # é as e + combining acute
    "plain": ("Dr Ben Zurich", "General Hospital", "ben@zurich-general.example"),
}
SIGNALS = {
    # label: (title, content); the first four fold like ASCII (only A-Z change), the rest do not
    "ascii": ("Class I recall of insulin pumps", "Affected lots: 5% of units, see notice FSN_2026."),
    "accented": ("Rückruf in Genève", "Betrifft Pumpen der Serie ärzteklasse."),
    "no_content": ("Guidance on CGM labeling", None),
    "split": ("Alpha", "Beta"),
    "capital_accent": ("ÉVALUATION CLINIQUE", "Résultats à Genève"),
    "sharp_s": ("Warnung: Hauptstraße", "Klinik an der Hauptstraße"),
    "decomposed": ("Zoe\u0301 device", "Notice"),
    "full_width": ("ｒｅｃａｌｌ notice", "Ｆｕｌｌ-width text"),
}


@pytest.fixture(scope="module")
def folded(dataset):
    """An organization of its own (the shared one's counts stay untouched), written through the store."""
    conn = connect(dataset.db)
    try:
        org = orgs.create_org(conn, "Unicode Medical", "enterprise")
        key = orgs.create_key(conn, org, "all")[1]
        people = {}
        with transaction(conn):
            for label, (name, institution, email) in PEOPLE.items():
                fields = {"full_name": name, "institution": institution, "specialties": ["cardiology"]}
                if email:
                    fields["email"] = email
                people[label] = kols.create_kol(conn, org, fields, None)["id"]
            renamed = kols.create_kol(conn, org, {"full_name": "Old Name", "specialties": ["x"]}, None)["id"]
            kols.update_kol(conn, org, renamed, {"full_name": "Ørjan Ødegård"})
            people["renamed"] = renamed
            product = products.create_product(conn, org, {"name": "HerzPumpe Ü", "description": "Für GROẞE Herzen",
                                                          "status": "active"})["id"]
            signal = signals.ingest_signal(conn, org, {
                "title": "ÉTUDE CLINIQUE", "content": "Résultats à Zürich", "source_key": "ema",
                "sentiment": "neutral", "impact": {"level": "low", "score": 1, "categories": []}})["id"]
            signal_ids = {label: signals.ingest_signal(conn, org, {
                "title": title, "content": content, "source_key": "fda", "sentiment": "neutral",
                "impact": {"level": "low", "score": 1, "categories": []}})["id"]
                for label, (title, content) in SIGNALS.items()}
            campaign = campaigns.create_campaign(conn, org, {
                "name": "Ärzte-Newsletter", "type": "newsletter", "audience": {"external_contacts": ["a@b.example"]},
                "email": {"subject": "Hallo", "body_html": "<p>Hallo</p>"}})["id"]
    finally:
        conn.close()
    return key, people, {"product": product, "signal": signal, "campaign": campaign, "signals": signal_ids}


def found(server, key, path, text) -> set[str]:
    response = httpx.get(f"{server.base_url}{path}", params={"search": text, "per_page": 100}, headers=bearer(key))
    return {item["id"] for item in data_of(response)}


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        ("Zürich", {"zurich"}),
        ("ZÜRICH", {"zurich"}),  # the issue's case: SQLite LIKE found nothing
        ("zÜrIcH", {"zurich"}),
        ("Zurich", {"plain"}),  # accents stay significant
        ("ΣΩΚΡΆΤΗΣ", {"greek"}),  # final sigma folds like any sigma
        ("παπαδόπουλος", {"greek"}),
        ("ИВАНОВ", {"cyrillic"}),
        ("алмазова", {"cyrillic"}),
        ("HAUPTSTRASSE", {"strasse"}),  # ß folds to ss
        ("WEISS", {"strasse"}),
        ("ZOÉ", {"decomposed"}),  # a composed term finds the decomposed name
        ("ｚüｒｉｃｈ", {"zurich"}),  # full-width letters
        ("ØRJAN ØDEGÅRD", {"renamed"}),  # an updated name is searchable under its new value only
        ("old name", set()),
        ("USZ.EXAMPLE", {"zurich"}),  # email
        ("%", set()),  # no wildcards
        ("_", set()),
    ],
)
def test_kol_search_folds_case_for_every_script(server, folded, text, labels):
    key, people, _ = folded
    assert found(server, key, "/kols", text) == {people[label] for label in labels}


def test_a_term_never_matches_across_two_fields(server, folded):
    key, _, _ = folded
    assert found(server, key, "/kols", "Keller Universitätsspital") == set()
    assert found(server, key, "/kols", "kellerUniversitätsspital") == set()


def test_product_signal_and_campaign_searches_fold_the_same_way(server, folded):
    key, _, other = folded
    assert found(server, key, "/products", "herzpumpe ü") == {other["product"]}
    assert found(server, key, "/products", "große herzen") == {other["product"]}  # description; ẞ -> ss
    assert found(server, key, "/signals", "étude clinique") == {other["signal"]}
    assert found(server, key, "/signals", "ZÜRICH") == {other["signal"]}  # content
    assert found(server, key, "/campaigns", "ÄRZTE") == {other["campaign"]}


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        ("RECALL", {"ascii", "full_width"}),
        ("recall of INSULIN", {"ascii"}),
        ("5%", {"ascii"}),  # % and _ are literal characters, never wildcards
        ("%", {"ascii"}),
        ("fsn_2026", {"ascii"}),
        ("_", {"ascii"}),
        ("GENÈVE", {"accented", "capital_accent"}),  # non-ASCII letters of a raw field, any case of the term
        ("gene\u0300ve", {"accented", "capital_accent"}),  # a decomposed term finds the composed text
        ("Geneve", set()),  # accents stay significant
        ("ÄRZTE", {"accented"}),
        ("cgm LABELING", {"no_content"}),
        ("alphabeta", set()),  # never across title and content
        ("alpha beta", set()),
        ("évaluation", {"capital_accent"}),
        ("HAUPTSTRASSE", {"sharp_s"}),
        ("ZOÉ", {"decomposed"}),
        ("FULL-WIDTH", {"full_width"}),
    ],
)
def test_signal_search_answers_alike_with_and_without_a_folded_copy(server, folded, text, labels):
    key, _, other = folded
    ids = other["signals"]
    assert found(server, key, "/signals", text) == {ids[label] for label in labels}


def test_signals_that_fold_like_ascii_store_no_folded_copy(dataset, folded):
    _, _, other = folded
    conn = connect(dataset.db)
    try:
        stored = dict(conn.execute("SELECT id, search_text FROM signals WHERE id IN (SELECT value FROM json_each(?))",
                                   (json.dumps(list(other["signals"].values())),)).fetchall())
    finally:
        conn.close()
    empty = {label for label, signal_id in other["signals"].items() if stored[signal_id] == ""}
    assert empty == {"ascii", "accented", "no_content", "split"}


def test_no_character_folds_to_an_ascii_capital():
    """The LIKE path relies on it: a folded term never holds A-Z, so LIKE's A-Z folding adds no match."""
    capitals = re.compile("[A-Z]")
    assert not [hex(point) for point in range(sys.maxunicode + 1)
                if not 0xD800 <= point <= 0xDFFF and capitals.search(search.fold(chr(point)))]


def _old_schema() -> str:
    """schema.sql as it was before search_text existed."""
    schema = resources.files("service.store").joinpath("schema.sql").read_text()
    lines = [line for line in schema.splitlines() if "search_text" not in line]
    text = "\n".join(lines)
    for before, after in (("updated_at          TEXT NOT NULL,\n);", "updated_at          TEXT NOT NULL\n);"),
                          ("updated_at         TEXT NOT NULL,\n);", "updated_at         TEXT NOT NULL\n);"),
                          ("sent_at         TEXT,\n);", "sent_at         TEXT\n);")):
        text = text.replace(before, after)
    return text


def test_a_database_from_before_the_folded_column_is_migrated_on_start(tmp_path):
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(_old_schema())
    assert "search_text" not in {row[1] for row in conn.execute("PRAGMA table_info(kols)")}
    conn.execute("INSERT INTO organizations (id, name, plan, created_at) VALUES ('org_old', 'Old', 'enterprise', 'x')")
    conn.execute("INSERT INTO kols (id, org_id, full_name, institution, created_at, updated_at) "
                 "VALUES ('kol_old', 'org_old', 'Dr Old', 'Universitätsspital Zürich', 'a', 'a')")
    conn.execute("INSERT INTO signals (id, org_id, title, source_key, source_name, impact_level, impact_score, "
                 "sentiment, published_at, fetched_at, updated_at) "
                 "VALUES ('sig_old', 'org_old', 'RÜCKRUF', 'fda', 'FDA', 'low', 1, 'neutral', 'a', 'a', 'a')")
    conn.commit()
    conn.close()

    init_db(db)
    conn = connect(db)
    key = orgs.create_key(conn, "org_old", "all")[1]
    conn.close()
    with ServiceServer(ServiceSettings(db=db, rate_limits_enabled=False, webhook_worker_enabled=False)) as server:
        assert found(server, key, "/kols", "ZÜRICH") == {"kol_old"}
        assert found(server, key, "/signals", "rückruf") == {"sig_old"}
    init_db(db)  # a second start changes nothing
