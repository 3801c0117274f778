"""Probable matches: the same person under another email, found by blocking and scoring.

After the email pass, KOLs left alone (missing_in_crm, no_email) are compared with the contacts
left alone (crm_only), and every contact with every other (duplicate sets, duplicates.py).

Blocking (features.py computes the keys): a pair is compared only when the two records share one
of: the Metaphone codes of first-name group and last name (in either order, so swapped names
meet), last name code + first initial (for a side that gives only an initial), the E.164 phone,
the email's local part, the first-name group or the last name at the same institution. A key
held by more than BLOCK_CAP records on one side (a switchboard number, a very common name) blocks
nothing: other keys still bring its true pairs together.

Scoring is a Fellegi-Sunter sum: each field's comparison level adds log2(m/u) bits, m being how
often the level occurs for one person (set by judgment, docs/crm-decisions-reconciliation.md), u
how often for two people (for exact names, phones and institutions, the value's own frequency in
the data: sharing "Smith" says less than sharing "Brzęczyszczykiewicz"). The sum plus the prior
(log2 of the chance that a given pair is one person: PRIOR_SHARE of the smaller side among the
larger one) is turned into a probability, the score, 0..1. Every field's level and bits are kept
as the pair's reasons.
"""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa
from rapidfuzz import fuzz, process

from crm import features
from resources.sql import sql_literal
from resources.crm.base import DEFAULT_MATCH_THRESHOLD

BLOCK_CAP = 20  # KOL-contact blocks: records per side
DUPLICATE_BLOCK_CAP = 20  # contact-contact blocks (every contact takes part: a smaller cap keeps the pairs near-linear)
ALL_KINDS = "niepmfl"  # every kind of blocking key (keys' docstring says what each is)
# Contact-contact pairs block on these alone: the institution keys (f, l) would pair every colleague, and the
# name spelled by an email (m) blocks a KOL with a contact only.
DUPLICATE_KINDS = "niep"
DEFAULT_THRESHOLD = DEFAULT_MATCH_THRESHOLD
# Share of the unmatched KOLs assumed to have a contact among the unmatched contacts (the prior).
PRIOR_SHARE = 0.5
# Share of contacts assumed to have a duplicate (the prior of a contact-contact pair).
DUPLICATE_SHARE = 0.05
MAX_BITS = 14.0  # no single field says more than this
CANDIDATE_FLOOR = 0.01  # a pair scoring less is no candidate worth listing
GENERIC_SHARE = 0.01  # an institution word in more names than this says nothing about the place
GENERIC_CITIES = 3  # nor does one found in the institutions of this many cities


def _bits(m: float, u: float) -> float:
    return round(math.log2(m / u), 2)


# log2(m/u) of the levels with a fixed u; exact names, phones and institutions use their frequency.
W = {
    "first_nickname": _bits(0.06, 0.003), "first_typo": _bits(0.04, 0.01), "first_initial": _bits(0.05, 0.004),
    "first_differ": _bits(0.005, 0.95),
    "last_part": _bits(0.05, 0.002), "last_typo": _bits(0.06, 0.003), "last_differ": _bits(0.04, 0.99),
    "swapped": -2.0,
    "phone_differ": _bits(0.45, 1.0),
    # two mailboxes of one name at one institution (kumiko_kimura@, kumiko_kimura2@): its mail system numbered
    # the second person of that name; one person rarely holds both
    "local_numbered": _bits(0.02, 0.9),
    "email_equal": MAX_BITS, "local_named": _bits(0.3, 0.25), "local_other": 9.0, "local_similar": _bits(0.1, 0.02),
    "email_differ": _bits(0.6, 1.0), "domain_equal": _bits(0.3, 0.05), "domain_differ": _bits(0.6, 0.9),
    "institution_similar": _bits(0.15, 0.01), "city_equal": _bits(0.15, 0.02), "country_differ": _bits(0.05, 0.7),
    "place_differ": _bits(0.25, 0.97),
    "department_equal": _bits(0.7, 0.15), "department_differ": _bits(0.05, 0.85),
    "title_equal": _bits(0.55, 0.1), "title_similar": _bits(0.2, 0.1), "title_differ": _bits(0.25, 0.85),
    # a department has a few titles: two people of one department share one a third of the time
    "title_equal_same_department": _bits(0.55, 0.35),
}
M_EXACT = {"first": 0.85, "last": 0.85, "phone": 0.5, "institution": 0.6}
U_FLOOR = {"first": 1e-3, "last": 2e-4, "phone": 1e-5, "institution": 5e-4}
CAP = {"first": 7.0, "last": 11.0, "phone": 12.0, "institution": 9.0}


# Levels of place (institution similarity, city, country) and role, over a_/b_ columns and inst_sim, title_sim.
_PLACE_LEVELS = """
    CASE WHEN inst_sim >= 0.9 THEN 'same_institution' WHEN inst_sim >= 0.85 THEN 'similar_institution'
         WHEN a_city IS NOT NULL AND a_city = b_city THEN 'same_city'
         WHEN a_country IS NOT NULL AND b_country IS NOT NULL AND a_country <> b_country THEN 'other_country'
         WHEN inst_sim IS NOT NULL THEN 'other_institution' ELSE 'missing' END AS place_level,
    CASE WHEN a_dept IS NULL OR b_dept IS NULL THEN 'missing' WHEN a_dept = b_dept THEN 'equal' ELSE 'differ' END
      AS dept_level,
    CASE WHEN title_sim IS NULL THEN 'missing' WHEN title_sim >= 0.999 THEN 'equal' WHEN title_sim >= 0.8 THEN 'similar'
         ELSE 'differ' END AS title_level"""
_ROLE_WEIGHT = f"""(CASE dept_level WHEN 'equal' THEN {W["department_equal"]} WHEN 'differ' THEN {W["department_differ"]} ELSE 0 END
      + CASE title_level WHEN 'equal' THEN CASE WHEN dept_level = 'equal' THEN {W["title_equal_same_department"]}
                                                ELSE {W["title_equal"]} END WHEN 'similar' THEN {W["title_similar"]}
             WHEN 'differ' THEN {W["title_differ"]} ELSE 0 END)"""


def _place_weight(same_institution: str) -> str:
    """The place's weight from place_level; `same_institution`: SQL of that level's weight."""
    return f"""(CASE place_level WHEN 'same_institution' THEN {same_institution}
         WHEN 'similar_institution' THEN {W["institution_similar"]} WHEN 'same_city' THEN {W["city_equal"]}
         WHEN 'other_country' THEN {W["country_differ"]} WHEN 'other_institution' THEN {W["place_differ"]} ELSE 0 END)"""


def keys(conn: duckdb.DuckDBPyConnection, table: str, spelled_names: bool = False, kinds: str = ALL_KINDS) -> None:
    """TEMP table {table}_keys (rid, key, probe): the blocking keys of `kinds` of a feature table. Keys starting
    'i' (last name code + first initial) block only with a record that gives just an initial (probe).
    `spelled_names` (the KOL side): also the local parts the record's name would make ('m' keys, which
    the other side holds for its email's letters)."""
    spelled = """
  UNION ALL SELECT rid, 'm' || unnest(sp), false FROM {table} WHERE sp IS NOT NULL AND NOT initial_only""" \
        if spelled_names else ""
    parts = {
        "n": """SELECT rid, 'n' || least(f, l) || '|' || greatest(f, l) AS key, false AS probe
  FROM (SELECT rid, unnest(fp) AS f, lp FROM {table} WHERE NOT initial_only) s, unnest(s.lp) u(l)""",
        "i": "SELECT rid, 'i' || l || '|' || fi, initial_only FROM (SELECT rid, fi, initial_only, unnest(lp) AS l FROM {table})",
        "p": "SELECT rid, 'p' || phone, false FROM {table} WHERE phone IS NOT NULL",
        "e": "SELECT rid, 'e' || em_local, false FROM {table} WHERE length(em_local) >= 4",
        # a local part spelling a name (amanda.benitez@, benitez.a@) meets the record of that name
        "m": "SELECT rid, 'm' || em_letters, false FROM {table} WHERE length(em_letters) >= 5" + spelled,
        "f": "SELECT rid, 'f' || fc[1] || '|' || inst, false FROM {table} WHERE inst IS NOT NULL AND fc IS NOT NULL",
        "l": "SELECT rid, 'l' || ln || '|' || inst, false FROM {table} WHERE inst IS NOT NULL AND ln IS NOT NULL",
    }
    union = "\n  UNION ALL ".join(parts[kind] for kind in kinds).format(table=table)
    conn.execute(f"CREATE OR REPLACE TEMP TABLE {table}_keys AS SELECT DISTINCT rid, key, probe FROM (\n  {union}\n)")


def pairs(conn: duckdb.DuckDBPyConnection, left: str, right: str | None, out: str, kinds: str = ALL_KINDS,
          cap: int = BLOCK_CAP, keyed: bool = False) -> int:
    """TEMP table `out` (a, b): the row ids (rid) of the distinct pairs sharing a key of one of `kinds` held by at most `cap` records
    on each side (of `left` and `right`; with right None, pairs within `left`, a < b). `keyed`: (a, b, key), a row per
    key that brings the pair together. Returns the row count."""
    same = right is None
    wanted = "[" + ", ".join(f"'{k}'" for k in kinds) + "]"
    for side, table in (("_pm_lk", left), *((("_pm_rk", right),) if not same else ())):
        conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {side} AS
SELECT k.rid, k.key, k.probe FROM {table}_keys k
SEMI JOIN (SELECT key FROM {table}_keys WHERE list_contains({wanted}, left(key, 1)) GROUP BY key
           HAVING count(*) <= {int(cap)}) small USING (key)""")
    rk = "_pm_lk" if same else "_pm_rk"
    order = "AND l.rid < r.rid" if same else ""
    other = "WHERE l.rid <> r.rid" if same else ""
    key, columns = (", l.key", "a, b, key") if keyed else ("", "a, b")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {out} AS
SELECT DISTINCT {columns} FROM (
  SELECT l.rid AS a, r.rid AS b{key} FROM _pm_lk l JOIN {rk} r ON r.key = l.key WHERE NOT starts_with(l.key, 'i') {order}
  -- a last name + initial key pairs only a record that gives just an initial with the others
  UNION ALL SELECT l.rid, r.rid{key} FROM (SELECT * FROM _pm_lk WHERE probe) l JOIN {rk} r ON r.key = l.key {other}
  UNION ALL SELECT l.rid, r.rid{key} FROM _pm_lk l JOIN (SELECT * FROM {rk} WHERE probe) r ON r.key = l.key {other}
) WHERE {"a < b" if same else "true"}""")
    conn.execute("DROP TABLE IF EXISTS _pm_lk")
    conn.execute("DROP TABLE IF EXISTS _pm_rk")
    return conn.execute(f"SELECT count(*) FROM {out}").fetchall()[0][0]


def name_compatible(conn: duckdb.DuckDBPyConnection, pair_table: str, left: str, right: str,
                    corroborated: bool = False) -> None:
    """Keep only the pairs whose names can be one person's (first names equal, nicknames, typos or an
    initial; last names equal, sharing a part or typos; or the two swapped): no other evidence outweighs
    two different names, and scoring is the costly part. `corroborated` (two contacts): also some field
    besides the name agrees (phone, email or its local part, institution, email domain or city), as two
    records of one person in one CRM nearly always share one, and a name alone never is a duplicate."""
    jw = "jaro_winkler_similarity"
    corroboration = ("AND (a.phone = b.phone OR a.em_local = b.em_local OR a.inst = b.inst OR a.city = b.city "
                     "OR a.em_domain = b.em_domain OR pm_local_close(a.em_local, b.em_local))"
                     if corroborated else "")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {pair_table} AS
SELECT p.a, p.b FROM {pair_table} p JOIN {left} a ON a.rid = p.a JOIN {right} b ON b.rid = p.b
WHERE ((a.fn IS NULL OR b.fn IS NULL OR a.fi = b.fi AND (a.initial_only OR b.initial_only OR a.fn = b.fn
         OR list_has_any(a.fc, b.fc) OR pm_first_typo(a.fn, b.fn)) OR list_has_any(a.fc, b.fc))
  AND (a.ln IS NULL OR b.ln IS NULL OR a.ln = b.ln OR list_has_any(pm_surnames(a.lt), b.lt) OR {jw}(a.ln, b.ln) >= 0.9)
   OR (list_contains(b.lt, a.fn) OR {jw}(a.fn, b.ln) >= 0.92) AND (list_contains(a.lt, b.fn) OR {jw}(a.ln, b.fn) >= 0.92))
  {corroboration}""")


def _text_similarity(conn: duckdb.DuckDBPyConnection, pair_table: str, left: str, right: str) -> None:
    """TEMP table pm_sim (x, y, sim) of the distinct institution and title pairs that are not equal:
    rapidfuzz's token_set_ratio / 100 (word order and extra words do not count). Institutions are
    compared without their generic words (pm_generic: words in more than GENERIC_SHARE of the names, such
    as Hospital or Klinikum, so that "Klinikum Augsburg" and "Klinikum Passau" are two places), and only
    when they share a word that is left, within a country; other pairs are other institutions."""
    generic = "[" + ", ".join(sql_literal(row[0]) for row in conn.execute("SELECT word FROM pm_generic").fetchall()) + "]"
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE pm_words AS
SELECT inst, coalesce(nullif(list_filter(string_split(inst, ' '), lambda w: NOT list_contains({generic}::VARCHAR[], w)), []),
                      string_split(inst, ' ')) AS words
FROM (SELECT inst FROM {left} UNION SELECT inst FROM {right}) WHERE inst IS NOT NULL""")
    rows = conn.execute(f"""
WITH places AS (
  SELECT DISTINCT a.inst AS x, b.inst AS y FROM {pair_table} p JOIN {left} a ON a.rid = p.a JOIN {right} b ON b.rid = p.b
  WHERE a.inst <> b.inst AND (a.country IS NULL OR b.country IS NULL OR a.country = b.country)
)
SELECT x, y, array_to_string(wx.words, ' '), array_to_string(wy.words, ' ')
FROM places JOIN pm_words wx ON wx.inst = x JOIN pm_words wy ON wy.inst = y WHERE list_has_any(wx.words, wy.words)
UNION ALL
SELECT DISTINCT a.title, b.title, a.title, b.title FROM {pair_table} p JOIN {left} a ON a.rid = p.a JOIN {right} b ON b.rid = p.b
WHERE a.title <> b.title""").fetchall()
    conn.execute("DROP TABLE pm_words")
    sims = process.cpdist([r[2] for r in rows], [r[3] for r in rows], scorer=fuzz.token_set_ratio, workers=-1) / 100 \
        if rows else []
    conn.register("pm_sim_arrow", pa.table({"x": [r[0] for r in rows], "y": [r[1] for r in rows],
                                            "sim": pa.array(list(sims), pa.float64())}))
    conn.execute("CREATE OR REPLACE TEMP TABLE pm_sim AS SELECT * FROM pm_sim_arrow")
    conn.unregister("pm_sim_arrow")


def frequencies(conn: duckdb.DuckDBPyConnection, population: str) -> None:
    """TEMP tables of value frequencies (u of the exact levels) over a feature table."""
    total = max(conn.execute(f"SELECT count(*) FROM {population}").fetchone()[0], 1)
    for name, column in (("fn", "fn"), ("ln", "ln"), ("phone", "phone"), ("inst", "inst")):
        conn.execute(f"CREATE OR REPLACE TEMP TABLE pm_tf_{name} AS SELECT {column} AS v, count(*) / {total} AS u "
                     f"FROM {population} WHERE {column} IS NOT NULL GROUP BY ALL")
    # A word naming no one place: in more than GENERIC_SHARE of the names (Hospital), or in the names of
    # institutions in GENERIC_CITIES cities or more (Universitair Medisch Centrum, St. Vincent: a kind or a patron)
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE pm_generic AS
WITH names AS (SELECT DISTINCT inst, city FROM {population} WHERE inst IS NOT NULL)
SELECT word FROM (SELECT DISTINCT inst, city, unnest(string_split(inst, ' ')) AS word FROM names)
GROUP BY word HAVING (count(DISTINCT inst) > {GENERIC_SHARE} * (SELECT count(DISTINCT inst) FROM names)
                      OR count(DISTINCT city) >= {GENERIC_CITIES})
                  AND (SELECT count(DISTINCT inst) FROM names) >= 50""")


def _exact(kind: str, u_sql: str) -> str:
    return f"least({CAP[kind]}, log2({M_EXACT[kind]} / greatest(coalesce({u_sql}, 0), {U_FLOOR[kind]})))"


def _within_reach(conn: duckdb.DuckDBPyConnection, pair_table: str, left: str, right: str, needed: float) -> str:
    """TEMP table _pm_reach (a, b): the pairs of `pair_table` whose score can reach `needed` bits, from an
    upper bound of the score built from equalities and the similarity table only (no list, no edit
    distance), in a join of the narrow columns; returns its name. Each field's bound is at least what
    score() can give it:

    - name: an equal first name weighs its exact weight (or an initial's), any other at most the first
      name's cap (a nickname, a typo, or an email spelling it, which counts as exact); the last name alike;
      a swap at most both exact weights less the swap's cost;
    - phone: equal at most its cap, else exactly its level; email: equal 14, an equal local part at most
      local_other, a local part one or two characters longer or shorter, or with the same letters, at most
      local_similar, any other is 'differ' or 'numbered' (less); the domain exactly;
    - place and role exactly (their levels need only equalities and the similarity table);
    - the colleagues rule only lowers a score, so it is left out.
    The pairs scored below `needed` are the only ones dropped, so no decision changes; score() computes
    every remaining pair in full."""
    webmail = "[" + ", ".join(f"'{d}'" for d in features.WEBMAIL) + "]"
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _pm_reach AS
WITH j AS (
  SELECT p.a, p.b, a.fn = b.fn AS same_first, a.initial_only OR b.initial_only AS initial, a.ln = b.ln AS same_last,
         {_exact("first", "tf.u")} AS ef, {_exact("last", "tl.u")} AS el,
         CASE WHEN a.phone IS NULL OR b.phone IS NULL THEN 0 WHEN a.phone = b.phone THEN {CAP["phone"]}
              ELSE {W["phone_differ"]} END AS w_phone,
         CASE WHEN a.email IS NULL OR b.email IS NULL THEN 0
              WHEN a.email = b.email THEN {W["email_equal"]}
              WHEN a.em_local = b.em_local THEN greatest({W["local_other"]}, {W["local_named"]})
              WHEN coalesce(abs(length(a.em_local) - length(b.em_local)) <= 2 OR a.em_letters = b.em_letters, true)
                THEN greatest({W["local_similar"]}, {W["local_named"]}, {W["email_differ"]})
              ELSE greatest({W["email_differ"]}, {W["local_numbered"]}) END
         + CASE WHEN a.em_domain IS NULL OR b.em_domain IS NULL OR a.email = b.email THEN 0
                WHEN a.em_domain = b.em_domain THEN CASE WHEN list_contains({webmail}, a.em_domain) THEN 0
                                                         ELSE {W["domain_equal"]} END
                ELSE {W["domain_differ"]} END AS w_email,
         a.inst AS a_inst, b.inst AS b_inst, a.city AS a_city, b.city AS b_city, a.country AS a_country,
         b.country AS b_country, a.dept AS a_dept, b.dept AS b_dept,
         CASE WHEN a.inst IS NULL OR b.inst IS NULL THEN NULL WHEN a.inst = b.inst THEN 1.0 ELSE coalesce(si.sim, 0) END
           AS inst_sim,
         CASE WHEN a.title IS NULL OR b.title IS NULL THEN NULL WHEN a.title = b.title THEN 1.0 ELSE coalesce(st.sim, 0) END
           AS title_sim
  FROM {pair_table} p JOIN {left} a ON a.rid = p.a JOIN {right} b ON b.rid = p.b
  LEFT JOIN pm_sim si ON si.x = a.inst AND si.y = b.inst LEFT JOIN pm_sim st ON st.x = a.title AND st.y = b.title
  LEFT JOIN pm_tf_fn tf ON tf.v = a.fn LEFT JOIN pm_tf_ln tl ON tl.v = a.ln
),
placed AS (SELECT *, {_PLACE_LEVELS} FROM j)
SELECT a, b FROM placed
WHERE greatest(CASE WHEN coalesce(same_first, false) THEN CASE WHEN initial THEN greatest(ef, {W["first_initial"]}) ELSE ef END
                    ELSE {CAP["first"]} END
               + CASE WHEN coalesce(same_last, false) THEN el ELSE {CAP["last"]} END,
               ef + el + {W["swapped"]})
      + w_phone + w_email + {_place_weight(str(CAP["institution"]))} + {_ROLE_WEIGHT}
      >= {needed}""")
    return "_pm_reach"


def score(conn: duckdb.DuckDBPyConnection, pair_table: str, left: str, right: str, prior: float, out: str,
          min_score: float = 0.0, reasons_from: float | None = None) -> None:
    """TEMP table `out` (a, b, bits, score, reasons JSON) of the pairs of `pair_table` scoring at least
    `min_score`; the reasons only where the score reaches `reasons_from` (None: nowhere). Most pairs score
    near 0 and their JSON would cost more than all the rest."""
    _text_similarity(conn, pair_table, left, right)
    # the least unrounded score shown as min_score (scores are rounded to 4 decimals), less a float's noise
    lowest = min_score - 0.00005
    if 0 < lowest < 1:
        pair_table = _within_reach(conn, pair_table, left, right, math.log2(lowest / (1 - lowest)) - prior - 1e-6)
    webmail = "[" + ", ".join(f"'{d}'" for d in features.WEBMAIL) + "]"
    jw = "jaro_winkler_similarity"
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {out} AS
WITH j AS (
  SELECT a.id AS a, b.id AS b, a.fn AS a_fn, b.fn AS b_fn, a.fi AS a_fi, b.fi AS b_fi, a.initial_only OR b.initial_only AS initial,
         a.fc AS a_fc, b.fc AS b_fc, a.ln AS a_ln, b.ln AS b_ln, a.lt AS a_lt, b.lt AS b_lt,
         a.email AS a_email, b.email AS b_email, a.em_local AS a_local, b.em_local AS b_local,
         a.em_domain AS a_domain, b.em_domain AS b_domain, a.phone AS a_phone, b.phone AS b_phone,
         a.em_letters AS a_letters, b.em_letters AS b_letters, a.sp AS a_sp, b.sp AS b_sp, a.spi AS a_spi, b.spi AS b_spi,
         a.inst AS a_inst, b.inst AS b_inst, a.city AS a_city, b.city AS b_city, a.country AS a_country,
         b.country AS b_country, a.dept AS a_dept, b.dept AS b_dept, a.title AS a_title, b.title AS b_title
  FROM {pair_table} p JOIN {left} a ON a.rid = p.a JOIN {right} b ON b.rid = p.b
),
levels AS (
  SELECT *,
    CASE WHEN a_fn IS NULL OR b_fn IS NULL THEN 'missing'
         WHEN initial THEN CASE WHEN a_fi = b_fi THEN 'initial' ELSE 'differ' END
         WHEN a_fn = b_fn THEN 'exact'
         WHEN list_has_any(a_fc, b_fc) THEN 'nickname'
         WHEN pm_first_typo(a_fn, b_fn) THEN 'typo' ELSE 'differ' END AS first_level,
    CASE WHEN a_ln IS NULL OR b_ln IS NULL THEN 'missing'
         WHEN a_ln = b_ln THEN 'exact'
         WHEN list_has_any(pm_surnames(a_lt), b_lt) THEN 'part'
         WHEN {jw}(a_ln, b_ln) >= 0.9 THEN 'typo' ELSE 'differ' END AS last_level,
    -- one side's email spells the other's name: first.last, first_last, last.first give the first name
    -- and the last, flast, f.last and lastf the last name (the CRM kept amanda.benitez@ for "A Benitez")
    list_contains(a_sp, b_letters) OR list_contains(b_sp, a_letters) AS mail_first,
    list_contains(a_sp, b_letters) OR list_contains(b_sp, a_letters) OR list_contains(a_spi, b_letters)
      OR list_contains(b_spi, a_letters) AS mail_last,
    a_fn IS NOT NULL AND b_fn IS NOT NULL AND a_ln IS NOT NULL AND b_ln IS NOT NULL AND NOT initial
      AND (list_contains(b_lt, a_fn) OR {jw}(a_fn, b_ln) >= 0.92)
      AND (list_contains(a_lt, b_fn) OR {jw}(a_ln, b_fn) >= 0.92) AS crossed,
    CASE WHEN a_phone IS NULL OR b_phone IS NULL THEN 'missing' WHEN a_phone = b_phone THEN 'equal' ELSE 'differ' END
      AS phone_level,
    CASE WHEN a_email IS NULL OR b_email IS NULL THEN 'missing'
         WHEN a_email = b_email THEN 'equal'
         WHEN a_domain = b_domain AND NOT list_contains({webmail}, a_domain) AND a_local <> b_local
              AND regexp_replace(a_local, '[0-9]+', '', 'g') = regexp_replace(b_local, '[0-9]+', '', 'g') THEN 'numbered'
         -- a local part made of the name (john.smith, jsmith2) says what the name says already
         WHEN a_local = b_local OR pm_local_close(a_local, b_local) OR a_letters = b_letters
           THEN CASE WHEN (a_ln IS NOT NULL AND contains(a_local, replace(a_ln, ' ', '')))
                       -- any surname of the name (Karl-Hermann Kitzmann's kitzmannk@)
                       OR list_bool_or(list_transform(pm_surnames(a_lt), lambda t: length(t) > 2 AND contains(a_local, t)))
                       OR (a_fn IS NOT NULL AND length(a_fn) > 2 AND contains(a_local, a_fn)) THEN 'local_named'
                     WHEN a_local = b_local THEN 'local_other' ELSE 'local_similar' END
         ELSE 'differ' END AS email_level,
    CASE WHEN a_domain IS NULL OR b_domain IS NULL OR a_email = b_email THEN 'missing'
         WHEN a_domain = b_domain THEN CASE WHEN list_contains({webmail}, a_domain) THEN 'missing' ELSE 'equal' END
         ELSE 'differ' END AS domain_level,
    CASE WHEN a_inst IS NULL OR b_inst IS NULL THEN NULL WHEN a_inst = b_inst THEN 1.0 ELSE coalesce(si.sim, 0) END AS inst_sim,
    CASE WHEN a_title IS NULL OR b_title IS NULL THEN NULL WHEN a_title = b_title THEN 1.0 ELSE coalesce(st.sim, 0) END
      AS title_sim
  FROM j LEFT JOIN pm_sim si ON si.x = j.a_inst AND si.y = j.b_inst LEFT JOIN pm_sim st ON st.x = j.a_title AND st.y = j.b_title
),
placed AS (SELECT *, {_PLACE_LEVELS} FROM levels),
weighed AS (
  SELECT p.*,
    CASE WHEN first_level = 'exact' OR coalesce(mail_first, false) THEN {_exact("first", "tf.u")}
         WHEN first_level = 'nickname' THEN {W["first_nickname"]} WHEN first_level = 'typo' THEN {W["first_typo"]}
         WHEN first_level = 'initial' THEN {W["first_initial"]} WHEN first_level = 'differ' THEN {W["first_differ"]}
         ELSE 0 END AS w_first,
    CASE WHEN last_level = 'exact' OR coalesce(mail_last, false) THEN {_exact("last", "tl.u")}
         WHEN last_level = 'part' THEN {W["last_part"]} WHEN last_level = 'typo' THEN {W["last_typo"]}
         WHEN last_level = 'differ' THEN {W["last_differ"]} ELSE 0 END AS w_last,
    {_exact("first", "tf.u")} + {_exact("last", "tl.u")} + {W["swapped"]} AS w_crossed,
    CASE phone_level WHEN 'equal' THEN {_exact("phone", "tp.u")} WHEN 'differ' THEN {W["phone_differ"]} ELSE 0 END AS w_phone,
    CASE email_level WHEN 'equal' THEN {W["email_equal"]} WHEN 'local_named' THEN {W["local_named"]}
         WHEN 'numbered' THEN {W["local_numbered"]}
         WHEN 'local_other' THEN {W["local_other"]} WHEN 'local_similar' THEN {W["local_similar"]}
         WHEN 'differ' THEN {W["email_differ"]} ELSE 0 END
      + CASE domain_level WHEN 'equal' THEN {W["domain_equal"]} WHEN 'differ' THEN {W["domain_differ"]} ELSE 0 END
      AS w_email,
    {_place_weight(_exact("institution", "ti.u"))} AS w_place, {_ROLE_WEIGHT} AS w_role
  FROM placed p
  LEFT JOIN pm_tf_fn tf ON tf.v = p.a_fn LEFT JOIN pm_tf_ln tl ON tl.v = p.a_ln
  LEFT JOIN pm_tf_phone tp ON tp.v = p.a_phone LEFT JOIN pm_tf_inst ti ON ti.v = p.a_inst
),
named AS (
  -- crossed names whose email spells them (in either order) are a swap the email confirms
  SELECT *, crossed AND (w_crossed > w_first + w_last OR coalesce(mail_first, false)) AS swapped,
         CASE WHEN crossed THEN greatest(w_crossed, w_first + w_last) ELSE w_first + w_last END AS w_name
  FROM weighed
),
judged AS (
  -- A first or a last name that differs outright (not a typo, nickname or initial, not spelled by the email,
  -- not a swap), with neither the phone nor the email's local part agreeing: colleagues share an institution,
  -- a department and a mail domain, so those say nothing for one person here; only evidence against counts.
  -- Two local parts that each spell their own record's name (baudry.daniel, baudry.danielle) agree only as
  -- much as the names do.
  SELECT * REPLACE (CASE WHEN colleagues THEN least(w_place, 0) ELSE w_place END AS w_place,
                    CASE WHEN colleagues THEN least(w_role, 0) ELSE w_role END AS w_role,
                    CASE WHEN colleagues THEN least(w_email, 0) ELSE w_email END AS w_email)
  FROM (SELECT *, NOT swapped AND (first_level = 'differ' AND NOT coalesce(mail_first, false)
                                   OR last_level = 'differ' AND NOT coalesce(mail_last, false))
                  AND phone_level <> 'equal' AND email_level <> 'equal'
                  AND (email_level NOT IN ('local_named', 'local_other', 'local_similar')
                       OR a_letters <> b_letters AND list_contains(a_sp || a_spi, a_letters)
                          AND list_contains(b_sp || b_spi, b_letters)) AS colleagues FROM named)
)
SELECT a, b, bits, score,
       CASE WHEN score >= {2.0 if reasons_from is None else float(reasons_from)} THEN to_json([
         {{'field': 'name', 'level': CASE WHEN swapped THEN 'swapped' ELSE 'first ' || first_level || ', last ' || last_level
           || CASE WHEN mail_first AND first_level <> 'exact' OR mail_last AND last_level <> 'exact'
                   THEN ' (the email spells the name)' ELSE '' END END,
           'bits': round(w_name, 1), 'kol': concat_ws(' ', a_fn, a_ln), 'crm': concat_ws(' ', b_fn, b_ln)}},
         {{'field': 'phone', 'level': phone_level, 'bits': round(w_phone, 1), 'kol': a_phone, 'crm': b_phone}},
         {{'field': 'email', 'level': email_level || ', domain ' || domain_level, 'bits': round(w_email, 1),
           'kol': a_email, 'crm': b_email}},
         {{'field': 'institution', 'level': place_level || CASE WHEN colleagues THEN ' (not counted: the names differ)'
                                                                     ELSE '' END, 'bits': round(w_place, 1),
           'kol': concat_ws(', ', a_inst, a_city, a_country), 'crm': concat_ws(', ', b_inst, b_city, b_country)}},
         {{'field': 'role', 'level': 'department ' || dept_level || ', title ' || title_level, 'bits': round(w_role, 1),
           'kol': concat_ws(', ', a_dept, a_title), 'crm': concat_ws(', ', b_dept, b_title)}}
       ]) END AS reasons
FROM (SELECT *, round(w_name + w_phone + w_email + w_place + w_role, 2) AS bits,
             round(1 / (1 + pow(2, -({prior} + w_name + w_phone + w_email + w_place + w_role))), 4) AS score FROM judged)
WHERE score >= {float(min_score)}""")
    conn.execute("DROP TABLE IF EXISTS _pm_reach")


def prior_bits(share: float, candidates: int) -> float:
    """log2 of the chance that one given pair is one person: `share` spread over `candidates` records."""
    return round(math.log2(share / max(candidates, 1)), 3)


CONTACT_FEATURES = "_pm_contacts"
KOL_FEATURES = "_pm_kols"
CONTACT_SOURCE = """
SELECT crm_id AS id, NULL AS full_name, first_name AS first, last_name AS last, email, phone, institution, city,
       crm_country(country) AS country, department, title, last_modified, external_id,
       (first_name IS NOT NULL)::INT + (last_name IS NOT NULL)::INT + (email IS NOT NULL)::INT + (title IS NOT NULL)::INT
       + (phone IS NOT NULL)::INT + (department IS NOT NULL)::INT + (institution IS NOT NULL)::INT
       + (city IS NOT NULL)::INT + (state IS NOT NULL)::INT + (country IS NOT NULL)::INT AS completeness
FROM {contacts}"""
KOL_SOURCE = """
SELECT id, full_name, NULL AS first, NULL AS last, email, phone, institution, location.city AS city,
       crm_country(location.country) AS country, department, title, NULL::TIMESTAMPTZ AS last_modified,
       NULL AS external_id, NULL::INT AS completeness
FROM {kols} WHERE id IN (SELECT id FROM {pool})"""


def contact_features(conn: duckdb.DuckDBPyConnection, contacts: str) -> None:
    """Features of every contact (crm/kept_features.py keeps them between runs) and their contact-contact
    blocking keys; match() makes the other kinds for the contacts it compares with KOLs."""
    features.build(conn, CONTACT_FEATURES, CONTACT_SOURCE.format(contacts=contacts))
    keys(conn, CONTACT_FEATURES, kinds=DUPLICATE_KINDS)


def prepare(conn: duckdb.DuckDBPyConnection, kols: str, kol_pool: str) -> None:
    """Features and blocking keys of the KOLs of `kol_pool` (a relation of ids), and the value frequencies over
    the contacts' features (the population), once those are built."""
    features.build(conn, KOL_FEATURES, KOL_SOURCE.format(kols=kols, pool=kol_pool))
    keys(conn, KOL_FEATURES, spelled_names=True)
    frequencies(conn, CONTACT_FEATURES)


def match(conn: duckdb.DuckDBPyConnection, contact_pool: str, threshold: float, rejected: str) -> None:
    """The KOL-contact pass over prepared features: TEMP tables

    - _pm_match (crm_id, kol_id, score, reasons, kol_primary): each contact of `contact_pool` whose best
      KOL scores at least `threshold` (ties by KOL id), with that KOL; kol_primary on the KOL's best contact;
    - _pm_candidates (kol_id, candidates, review): per KOL of the pool without a contact of its own, up to
      three scored contacts (best first) and whether one of them reaches the threshold (a match taken by
      another KOL: the KOL needs review, not a new contact).

    Pairs in `rejected` (kol_id, crm_id) are never proposed."""
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _pm_cpool AS SELECT * FROM {CONTACT_FEATURES} WHERE id IN (SELECT crm_id FROM {contact_pool})""")
    keys(conn, "_pm_cpool")
    pairs(conn, KOL_FEATURES, "_pm_cpool", "_pm_kc_pairs")
    sizes = conn.execute(f"SELECT (SELECT count(*) FROM {KOL_FEATURES}), (SELECT count(*) FROM _pm_cpool)").fetchone()
    score(conn, "_pm_kc_pairs", KOL_FEATURES, "_pm_cpool", prior_bits(PRIOR_SHARE, max(sizes)), "_pm_kc",
          min_score=CANDIDATE_FLOOR, reasons_from=threshold)
    conn.execute(f"DELETE FROM _pm_kc WHERE (a, b) IN (SELECT (kol_id, crm_id) FROM {rejected})")
    for table in ("_pm_kc_pairs", "_pm_cpool", "_pm_cpool_keys", f"{KOL_FEATURES}_keys", "pm_sim"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _pm_match AS
WITH best AS (
  SELECT b AS crm_id, a AS kol_id, score, reasons FROM _pm_kc WHERE score >= {float(threshold)}
  QUALIFY row_number() OVER (PARTITION BY b ORDER BY score DESC, a) = 1
)
SELECT *, row_number() OVER (PARTITION BY kol_id ORDER BY score DESC, crm_id) = 1 AS kol_primary FROM best""")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _pm_candidates AS
SELECT s.a AS kol_id,
       to_json(list({{'crm_id': s.b, 'name': c.crm_name, 'email': c.crm_email, 'institution': c.crm_institution,
                     'score': s.score}} ORDER BY s.score DESC, s.b)) AS candidates,
       max(s.score) >= {float(threshold)} AS review
FROM (SELECT * FROM _pm_kc WHERE a NOT IN (SELECT kol_id FROM _pm_match)
      QUALIFY row_number() OVER (PARTITION BY a ORDER BY score DESC, b) <= 3) s
JOIN _crm_c c ON c.crm_id = s.b
GROUP BY s.a""")


def one_person_per_kol(conn: duckdb.DuckDBPyConnection, sets: str, linked: str) -> None:
    """Drop from _pm_match what the duplicate sets (`sets`: crm_id, duplicate_set_id) say is someone else:

    - a contact in a set with a contact linked to another KOL (`linked`: crm_id, kol_id; by email or
      external id) is that KOL's second record, not this KOL;
    - a KOL's other contacts (not kol_primary) unless they are in one set with its best contact: a KOL
      is one person, so two contacts that are not one person cannot both be it, and the one that
      scores less is the namesake.

    Those contacts stay crm_only."""
    # The KOLs linked to each set first (a few rows per set), then the proposals: left to the optimizer as one
    # four-way join, the inequality was sometimes planned before the set join (a product of every linked set
    # member with every proposal, minutes at 1M).
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE _pm_set_kols AS
SELECT DISTINCT o.duplicate_set_id, l.kol_id FROM {sets} o JOIN {linked} l ON l.crm_id = o.crm_id""")
    conn.execute(f"""
DELETE FROM _pm_match WHERE crm_id IN (
  SELECT m.crm_id FROM _pm_match m JOIN {sets} d ON d.crm_id = m.crm_id
  JOIN _pm_set_kols s ON s.duplicate_set_id = d.duplicate_set_id WHERE s.kol_id <> m.kol_id)""")
    conn.execute("DROP TABLE _pm_set_kols")
    conn.execute(f"""
DELETE FROM _pm_match WHERE NOT kol_primary AND crm_id NOT IN (
  SELECT m.crm_id FROM _pm_match m JOIN {sets} d ON d.crm_id = m.crm_id
  JOIN (SELECT p.kol_id, s.duplicate_set_id FROM _pm_match p JOIN {sets} s ON s.crm_id = p.crm_id WHERE p.kol_primary) b
    ON b.kol_id = m.kol_id AND b.duplicate_set_id = d.duplicate_set_id)""")
