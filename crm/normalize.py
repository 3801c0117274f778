"""Comparison keys for emails, text, phones and countries, in Python and as DuckDB macros.

The reconciliation compares millions of values, so the keys are DuckDB SQL macros (vectorized
C++ string functions); Python (a scalar UDF; DuckDB's Python UDFs need numpy, pinned for that)
runs only for values with non-ASCII characters, which a CASE keeps apart (NFKC and
`str.casefold`, which DuckDB lacks: `lower('ß')` stays 'ß', casefold gives 'ss'). The Python
functions here are the reference the macros are tested against, and serve callers without a
connection.

Rules:
- email: trim, NFKC, casefold; '' is NULL. Salesforce lower-cases emails on save, so case and
  surrounding whitespace never make two emails differ.
- text: casefold, accents stripped (NFKD without combining marks), whitespace runs collapsed to
  one space, trimmed; '' is NULL. `name` also turns the punctuation . , ; into spaces first
  ("Dr. A. Smith" = "Dr A Smith").
- phone: digits only. A number written with an international prefix (`+` or `00`) loses its
  country calling code (ITU E.164 codes are 1 digit (1, 7), a known set of 2 digits, else 3),
  then any number loses one leading trunk `0`. What remains is the national number. Two phones
  are the same when their national numbers are equal, or when one ends with the other and the
  shorter has at least 7 digits (a country code written without `+`: "1 555 010 2345" =
  "555-010-2345").
- country: ISO 3166-1 alpha-2 from alpha-2/alpha-3 codes, English names (official and common)
  from pycountry, plus ALIASES (common non-English and colloquial names); text the table does
  not know is kept as its text key, so two unknown spellings still compare as text.
"""

from __future__ import annotations

import re
import unicodedata

import duckdb
import pyarrow as pa
import pycountry

# Colloquial and non-English country names pycountry does not carry (keys are text keys).
ALIASES: dict[str, str] = {
    "usa": "US", "u.s.a.": "US", "u.s.": "US", "united states": "US", "united states of america": "US",
    "america": "US", "etats-unis": "US", "estados unidos": "US", "vereinigte staaten": "US",
    "uk": "GB", "u.k.": "GB", "great britain": "GB", "britain": "GB", "england": "GB", "scotland": "GB",
    "wales": "GB", "northern ireland": "GB", "royaume-uni": "GB", "vereinigtes konigreich": "GB",
    "reino unido": "GB",
    "deutschland": "DE", "allemagne": "DE", "alemania": "DE", "germania": "DE", "brd": "DE",
    "frankreich": "FR", "francia": "FR", "espana": "ES", "spanien": "ES", "espagne": "ES",
    "italia": "IT", "italien": "IT", "italie": "IT", "osterreich": "AT", "autriche": "AT",
    "schweiz": "CH", "suisse": "CH", "svizzera": "CH", "nederland": "NL", "holland": "NL",
    "the netherlands": "NL", "niederlande": "NL", "belgie": "BE", "belgique": "BE", "belgien": "BE",
    "danmark": "DK", "sverige": "SE", "norge": "NO", "suomi": "FI", "polska": "PL", "cesko": "CZ",
    "czech republic": "CZ", "magyarorszag": "HU", "portugal": "PT", "brasil": "BR", "mexico": "MX",
    "nippon": "JP", "nihon": "JP", "zhongguo": "CN", "china": "CN", "prc": "CN", "korea": "KR",
    "south korea": "KR", "republic of korea": "KR", "russia": "RU", "turkey": "TR", "turkiye": "TR",
    "uae": "AE", "emirates": "AE", "ireland": "IE", "eire": "IE", "hellas": "GR", "ellada": "GR",
    "iran": "IR", "vietnam": "VN", "taiwan": "TW", "bolivia": "BO", "venezuela": "VE", "syria": "SY",
    "tanzania": "TZ", "moldova": "MD", "laos": "LA", "ivory coast": "CI", "cote d'ivoire": "CI",
}

# Two-digit ITU calling codes; 1 and 7 are the one-digit ones, every other code has three digits.
CALLING_CODE_PATTERN = r"^(1|7|2[07]|3[0-469]|4[013-9]|5[1-8]|6[0-6]|8[1246]|9[0-58]|[0-9]{3})"
_SPACES = re.compile(r"\s+")


def normalize_email(value: str | None) -> str | None:
    """Trimmed, NFKC, casefolded email; None for None or blank."""
    if value is None:
        return None
    folded = unicodedata.normalize("NFKC", value.strip()).casefold().strip()
    return folded or None


def normalize_text(value: str | None) -> str | None:
    """Casefolded, accent-free, whitespace-collapsed text; None for None or blank."""
    if value is None:
        return None
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", value).casefold())
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _SPACES.sub(" ", bare).strip() or None


def normalize_phone(value: str | None) -> str | None:
    """The national number: digits, without an international prefix's country code or a trunk 0."""
    if value is None:
        return None
    stripped = value.strip()
    digits = re.sub(r"[^0-9]", "", stripped)
    international = stripped.startswith("+") or digits.startswith("00")
    if international:
        digits = re.sub(CALLING_CODE_PATTERN, "", digits.removeprefix("00"))
    digits = digits.removeprefix("0")
    return digits or None


def same_phone(a: str | None, b: str | None) -> bool:
    """True when two phones name the same national number (see the module's rule)."""
    na, nb = normalize_phone(a), normalize_phone(b)
    if na is None or nb is None:
        return na is None and nb is None
    short, long_ = sorted((na, nb), key=len)
    return na == nb or (len(short) >= 7 and long_.endswith(short))


def country_table() -> dict[str, str]:
    """Text key of every known spelling -> ISO 3166-1 alpha-2."""
    table: dict[str, str] = {}
    for country in pycountry.countries:
        for attribute in ("alpha_2", "alpha_3", "name", "official_name", "common_name"):
            spelling = getattr(country, attribute, None)
            if spelling:
                table[normalize_text(spelling)] = country.alpha_2
    for alias, code in ALIASES.items():
        table[normalize_text(alias)] = code
    return table


_COUNTRIES: dict[str, str] | None = None


def normalize_country(value: str | None) -> str | None:
    """ISO alpha-2 code of a country spelling; the text key when unknown; None for None/blank."""
    global _COUNTRIES
    if _COUNTRIES is None:
        _COUNTRIES = country_table()
    key = normalize_text(value)
    return None if key is None else _COUNTRIES.get(key, key)


MACROS = (
    # ASCII values never reach Python: strlen (bytes) = length (characters) only for ASCII.
    "crm_email(x) AS NULLIF(CASE WHEN strlen(x) = length(x) THEN lower(trim(x)) ELSE crm_py_email(x) END, '')",
    # Bulk form: SQL only; fold_emails() then fixes the non-ASCII rows in place (Python off the hot path).
    "crm_email_ascii(x) AS NULLIF(lower(trim(x)), '')",
    # Accented Latin letters (Müller) stay in SQL: strip_accents(lower(x)) is Python's NFKD-without-marks
    # casefold whenever its result is ASCII; what it leaves non-ASCII (ß, ligatures, other scripts) goes to Python.
    "crm_text_fold(y) AS CASE WHEN strlen(y) = length(y) THEN y ELSE crm_py_text(y) END",
    "crm_text(x) AS NULLIF(trim(regexp_replace(crm_text_fold(CASE WHEN strlen(x) = length(x) THEN lower(x) "
    "ELSE strip_accents(lower(x)) END), '\\s+', ' ', 'g')), '')",
    "crm_name(x) AS crm_text(regexp_replace(x, '[.,;]', ' ', 'g'))",
    "crm_phone_national(x) AS NULLIF(regexp_replace(CASE WHEN starts_with(trim(x), '+') OR "
    "starts_with(regexp_replace(x, '[^0-9]', '', 'g'), '00') THEN regexp_replace(regexp_replace("
    "regexp_replace(x, '[^0-9]', '', 'g'), '^00', ''), '" + CALLING_CODE_PATTERN + "', '') "
    "ELSE regexp_replace(x, '[^0-9]', '', 'g') END, '^0', ''), '')",
    "crm_same_phone(a, b) AS CASE WHEN a IS NULL OR b IS NULL THEN a IS NULL AND b IS NULL "
    "ELSE a = b OR (least(length(a), length(b)) >= 7 AND (ends_with(a, b) OR ends_with(b, a))) END",
    "crm_country(x) AS coalesce((SELECT code FROM crm_countries WHERE key = crm_text(x)), crm_text(x))",
)


def register(conn: duckdb.DuckDBPyConnection) -> None:
    """Install the comparison macros (crm_email, crm_text, crm_name, crm_phone_national,
    crm_same_phone, crm_country) and their Python fallbacks on a connection (temporary objects)."""
    existing = {row[0] for row in conn.execute("SELECT function_name FROM duckdb_functions() WHERE function_name LIKE 'crm_py_%'").fetchall()}
    if "crm_py_email" not in existing:
        conn.create_function("crm_py_email", normalize_email, ["VARCHAR"], "VARCHAR", side_effects=False)
    if "crm_py_text" not in existing:
        conn.create_function("crm_py_text", normalize_text, ["VARCHAR"], "VARCHAR", side_effects=False)
    table = country_table()
    countries = pa.table({"key": list(table), "code": list(table.values())})
    conn.register("crm_countries_arrow", countries)
    conn.execute("CREATE OR REPLACE TEMP TABLE crm_countries AS SELECT * FROM crm_countries_arrow")
    conn.unregister("crm_countries_arrow")
    for macro in MACROS:
        conn.execute(f"CREATE OR REPLACE TEMP MACRO {macro}")


def fold_emails(conn: duckdb.DuckDBPyConnection, table: str, raw: str, key: str) -> None:
    """Finish crm_email_ascii keys: rows whose raw email has non-ASCII characters get crm_email."""
    conn.execute(f"UPDATE {table} SET {key} = crm_email({raw}) WHERE strlen({raw}) <> length({raw})")
