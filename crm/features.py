"""Comparison features of people for probable matching: name parts, nickname groups, phonetic
codes, E.164 phones, email parts, institution and role keys, in DuckDB.

Each record becomes one row of `features(relation)`'s columns (see FEATURE_SQL), computed by SQL
over the whole relation; Python runs only on distinct values SQL cannot handle:
- names are transliterated to ASCII: accents by DuckDB's strip_accents, other scripts (Cyrillic,
  Greek, Han, ...) and what strip_accents leaves (ß, ø, ł) by anyascii, Han characters one
  syllable per token so that 王伟 reads "wang wei";
- first names map to nickname groups from the `nicknames` package (Bill, Billy, Will ->
  william; Kate, Katy -> katherine): two first names agree when their groups meet;
- name tokens get their Metaphone code (jellyfish), computed once per distinct token;
- phones become E.164 with phonenumbers' metadata (each region's calling code and national
  prefix, as a table), so "030 1234567" in Germany and "+49 30 1234567" are one number, while
  Italy's leading 0 is kept as its numbering plan says.
"""

from __future__ import annotations

import csv
import importlib.resources
import re
import unicodedata
from functools import lru_cache

import duckdb
import jellyfish
import phonenumbers
import pyarrow as pa
from anyascii import anyascii
from nameparser.config.particles import PARTICLES

from resources.sql import has_table

# Tokens that are not part of a person's name: titles, degrees, suffixes.
NOT_NAMES = ("dr", "prof", "professor", "mr", "mrs", "ms", "md", "phd", "jr", "sr", "ii", "iii", "iv", "dipl", "med",
             "pd", "priv", "doz", "frau", "herr", "sir", "dame", "mme", "mlle", "m", "sig", "dott", "dssa", "ing")
# Free mail: an equal domain there says nothing about the person.
WEBMAIL = ("gmail.com", "googlemail.com", "yahoo.com", "hotmail.com", "outlook.com", "live.com", "icloud.com",
           "me.com", "aol.com", "gmx.de", "gmx.net", "web.de", "t-online.de", "orange.fr", "free.fr", "laposte.net",
           "libero.it", "yandex.ru", "mail.ru", "qq.com", "163.com", "126.com", "protonmail.com", "proton.me",
           "yahoo.co.uk", "yahoo.fr", "wp.pl", "onet.pl", "o2.pl", "uol.com.br", "bol.com.br")
# Surname particles in Latin script (van, de, von, della, al-, ...): sharing one is not sharing a surname (van
# Mare, van Dongen). Those of other scripts are left out: their transliterations vary.
SURNAME_PARTICLES = tuple(sorted({re.sub(r"[^a-z0-9]", "", anyascii(p).lower()) for p in PARTICLES
                                  if all(unicodedata.name(c, "").startswith("LATIN") for c in p if c.isalpha())} - {""}))
_HAN = re.compile(r"([\u2e80-\u9fff\uf900-\ufaff])")


def transliterate(value: str | None) -> str | None:
    """Lower-case ASCII of a name in any script; Han characters become one token each."""
    if value is None:
        return None
    return " ".join(anyascii(_HAN.sub(r" \1 ", value)).lower().split())


@lru_cache(maxsize=1)
def nickname_groups() -> pa.Table:
    """(name, canon): every name of the `nicknames` package's table with each canonical name it
    belongs to (a canonical name belongs to itself)."""
    rows: set[tuple[str, str]] = set()
    with importlib.resources.files("nicknames").joinpath("names.csv").open(encoding="utf-8") as handle:
        for canonical, relation, nickname in csv.reader(handle):
            if relation == "has_nickname":
                rows.update({(canonical, canonical), (nickname, canonical)})
    names, canons = zip(*sorted(rows))
    return pa.table({"name": list(names), "canon": list(canons)})


@lru_cache(maxsize=1)
def phone_regions() -> pa.Table:
    """(country, calling_code, national_prefix) of every region phonenumbers knows."""
    regions = sorted(phonenumbers.SUPPORTED_REGIONS)
    prefixes = [phonenumbers.PhoneMetadata.metadata_for_region(region).national_prefix for region in regions]
    return pa.table({"country": regions,
                     "calling_code": [str(phonenumbers.country_code_for_region(r)) for r in regions],
                     "national_prefix": prefixes})


def calling_code_pattern() -> str:
    """Regex of the country calling codes at the start of a number (ITU codes are prefix-free)."""
    codes = sorted({str(code) for code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE if code}, key=lambda c: (-len(c), c))
    return "^(" + "|".join(codes) + ")"


def e164(phone: str | None, country: str | None) -> str | None:
    """phonenumbers' own E.164 of a phone (the reference the SQL macro is tested against)."""
    if not phone:
        return None
    try:
        parsed = phonenumbers.parse(phone, country if country and country.isupper() and len(country) == 2 else None)
    except phonenumbers.NumberParseException:
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


MACROS = (
    # A name's text: ASCII, lower case, punctuation read as a space (apostrophes dropped: O'Brien = obrien).
    "pm_translit(x) AS CASE WHEN strlen(x) = length(x) THEN lower(x) "
    "WHEN strlen(strip_accents(x)) = length(strip_accents(x)) THEN lower(strip_accents(x)) ELSE pm_py_translit(x) END",
    "pm_name(x) AS NULLIF(trim(regexp_replace(regexp_replace(regexp_replace(pm_translit(x), '[''’`]', '', 'g'), "
    "'[^a-z0-9]+', ' ', 'g'), '\\s+', ' ', 'g')), '')",
    "pm_surnames(lt) AS list_filter(lt, lambda t: NOT list_contains("
    + "[" + ", ".join(f"'{t}'" for t in SURNAME_PARTICLES) + "], t))",
    # Two email local parts one typo apart (1 edit, 2 for long ones): not a shared prefix (augustin.pires, augustin.peltier)
    # (the length test first, in a CASE so that DuckDB skips the rest: the edit distance of every pair cost
    # more than the rest of its score)
    "pm_local_close(x, y) AS CASE WHEN x = y THEN true WHEN abs(length(x) - length(y)) <= 2 "
    "THEN damerau_levenshtein(x, y) <= CASE WHEN least(length(x), length(y)) >= 8 THEN 2 ELSE 1 END ELSE false END",
    # Two first names one typo apart, not one name and a longer one (Daniel, Danielle; Paul, Paula: two names)
    "pm_first_typo(x, y) AS jaro_winkler_similarity(x, y) >= 0.9 AND NOT starts_with(x, y) AND NOT starts_with(y, x)",
    "pm_tokens(x) AS list_filter(string_split(coalesce(pm_name(x), ''), ' '), "
    "lambda t: t <> '' AND NOT list_contains(" + "[" + ", ".join(f"'{t}'" for t in NOT_NAMES) + "], t))",
    # E.164 from a written phone and the record's ISO country: an extension is cut, '+'/'00' numbers keep
    # their calling code, national numbers lose their region's national prefix and get its calling code.
    "pm_digits(x) AS regexp_replace(regexp_replace(lower(x), '(ext|x|#|poste|durchwahl).*$', ''), '[^0-9]', '', 'g')",
    # d: the digits (pm_digits(x)), computed once by the caller; plus: the number was written with a '+'
    "pm_e164(d, plus, calling_code, national_prefix) AS CASE "
    "WHEN d IS NULL OR length(d) < 6 THEN NULL "
    "WHEN plus THEN '+' || d "
    "WHEN starts_with(d, '00') THEN '+' || substr(d, 3) "
    "WHEN calling_code IS NULL THEN NULL "
    "ELSE '+' || calling_code || CASE WHEN national_prefix IS NOT NULL AND starts_with(d, national_prefix) "
    "AND length(d) > 8 THEN substr(d, length(national_prefix) + 1) ELSE d END END",
)


def register(conn: duckdb.DuckDBPyConnection) -> None:
    """Install the feature macros and their lookup tables (temporary) on a connection."""
    exists = conn.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'pm_py_translit'").fetchall()[0][0]
    if not exists:
        conn.create_function("pm_py_translit", transliterate, ["VARCHAR"], "VARCHAR", side_effects=False)
    for name, table in (("pm_nicknames", nickname_groups()), ("pm_regions", phone_regions())):
        conn.register(f"{name}_arrow", table)
        conn.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_arrow")
        conn.unregister(f"{name}_arrow")
    for macro in MACROS:
        conn.execute(f"CREATE OR REPLACE TEMP MACRO {macro}")


def _metaphone(tokens: list[str]) -> list[str]:
    return [jellyfish.metaphone(token) or token for token in tokens]


def build(conn: duckdb.DuckDBPyConnection, table: str, source_sql: str) -> None:
    """Create TEMP table `table` of features from `source_sql`, a query with the columns id, full_name (a
    name in one piece: its first token is the first name) or first and last, email, phone, institution,
    city, country (ISO alpha-2), department, title, last_modified, external_id and completeness.

    Names, institutions, cities, departments and titles repeat across records, so each distinct value
    is normalized once (the regexes, and Python for other scripts) and joined back."""
    conn.execute(f"CREATE OR REPLACE TEMP TABLE {table}_src AS {source_sql}")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {table}_names AS
SELECT v, pm_tokens(v) AS tokens
FROM (SELECT full_name AS v FROM {table}_src UNION SELECT first FROM {table}_src UNION SELECT last FROM {table}_src)
WHERE v IS NOT NULL""")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {table}_texts AS
SELECT v, crm_text(v) AS key
FROM (SELECT institution AS v FROM {table}_src UNION SELECT city FROM {table}_src UNION SELECT department FROM {table}_src
      UNION SELECT title FROM {table}_src) WHERE v IS NOT NULL""")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {table}_base AS
WITH named AS (
  SELECT s.*, pm_digits(s.phone) AS digits, CASE WHEN s.full_name IS NOT NULL THEN nf.tokens[1:1] ELSE nfirst.tokens END AS ft,
         CASE WHEN s.full_name IS NOT NULL THEN nf.tokens[2:] ELSE nlast.tokens END AS lt
  FROM {table}_src s
  LEFT JOIN {table}_names nf ON nf.v = s.full_name LEFT JOIN {table}_names nfirst ON nfirst.v = s.first
  LEFT JOIN {table}_names nlast ON nlast.v = s.last
)
SELECT id,
       nullif(ft[1], '') AS fn,
       CASE WHEN len(ft) > 0 THEN left(ft[1], 1) END AS fi,
       coalesce(len(ft) > 0 AND length(ft[1]) = 1, false) AS initial_only,
       nullif(array_to_string(list_filter(lt, lambda t: length(t) > 1), ' '), '') AS ln,
       list_filter(lt, lambda t: length(t) > 1) AS lt,
       nullif(lower(trim(email)), '') AS email,
       nullif(split_part(lower(trim(email)), '@', 1), '') AS em_local,
       nullif(split_part(lower(trim(email)), '@', 2), '') AS em_domain,
       -- the local part's letters: first.last, first_last and last.first of one name read alike
       nullif(regexp_replace(split_part(lower(trim(email)), '@', 1), '[^a-z]', '', 'g'), '') AS em_letters,
       pm_e164(digits, starts_with(trim(phone), '+'), r.calling_code, r.national_prefix) AS phone,
       ti.key AS inst, tc.key AS city, named.country, td.key AS dept, tt.key AS title,
       last_modified, external_id, completeness
FROM named LEFT JOIN pm_regions r ON r.country = named.country
LEFT JOIN {table}_texts ti ON ti.v = named.institution LEFT JOIN {table}_texts tc ON tc.v = named.city
LEFT JOIN {table}_texts td ON td.v = named.department LEFT JOIN {table}_texts tt ON tt.v = named.title""")
    for part in ("src", "names", "texts"):
        conn.execute(f"DROP TABLE {table}_{part}")
    # The first name and its nickname groups (Bill: bill, william).
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {table}_fc AS
WITH firsts AS (SELECT DISTINCT fn FROM {table}_base WHERE fn IS NOT NULL)
SELECT f.fn, list_distinct(list_prepend(f.fn, list(n.canon) FILTER (WHERE n.canon IS NOT NULL))) AS fc
FROM firsts f LEFT JOIN pm_nicknames n ON n.name = f.fn GROUP BY f.fn""")
    # Metaphone codes, once per distinct token (names repeat: far fewer tokens than records).
    if not has_table(conn, "temp", "pm_phonetic"):
        conn.execute("CREATE TEMP TABLE pm_phonetic (token VARCHAR, code VARCHAR)")
    tokens = [row[0] for row in conn.execute(f"""
SELECT DISTINCT t FROM (SELECT unnest(lt) AS t FROM {table}_base UNION ALL SELECT unnest(fc) FROM {table}_fc)
WHERE t IS NOT NULL AND t NOT IN (SELECT token FROM pm_phonetic)""").fetchall()]
    if tokens:
        conn.register("pm_phonetic_arrow", pa.table({"token": tokens, "code": _metaphone(tokens)}))
        conn.execute("INSERT INTO pm_phonetic SELECT * FROM pm_phonetic_arrow")
        conn.unregister("pm_phonetic_arrow")
    conn.execute(f"""
CREATE OR REPLACE TEMP TABLE {table} AS
WITH fp AS (SELECT fn, list(DISTINCT p.code) AS fp FROM (SELECT fn, unnest(fc) AS t FROM {table}_fc) u
            JOIN pm_phonetic p ON p.token = u.t GROUP BY fn),
     lp AS (SELECT ln, list(DISTINCT p.code) AS lp
            FROM (SELECT DISTINCT ln, lt FROM {table}_base WHERE ln IS NOT NULL) d, unnest(d.lt) u(t)
            JOIN pm_phonetic p ON p.token = u.t GROUP BY ln),
     -- pairs join on this integer; in id order (sorting the ids alone), so pairs keep one orientation run to run
     ids AS (SELECT id, (row_number() OVER (ORDER BY id))::INTEGER AS rid FROM {table}_base)
SELECT f.*, fc.fc, fp.fp, lp.lp, ids.rid,
       -- the local parts the name makes: first.last, first_last, last.first (sp); flast, f.last, lastf (spi)
       CASE WHEN length(fn) > 1 AND ln IS NOT NULL THEN [fn || replace(ln, ' ', ''), replace(ln, ' ', '') || fn] END AS sp,
       CASE WHEN ln IS NOT NULL THEN [fi || replace(ln, ' ', ''), replace(ln, ' ', '') || fi] END AS spi
FROM {table}_base f JOIN ids USING (id) LEFT JOIN {table}_fc fc USING (fn) LEFT JOIN fp USING (fn) LEFT JOIN lp USING (ln)""")
    conn.execute(f"DROP TABLE {table}_fc")
    conn.execute(f"DROP TABLE {table}_base")

