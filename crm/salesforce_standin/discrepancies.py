"""Salesforce contacts generated from KOLs with planted discrepancies, and the status each should get:
the data `commops crm sandbox`, the demo, the CRM tests and benchmarks/reconciliation.py put in the stand-in.

`plant_discrepancies` (dicts, for tests and the sandbox) picks round(len(kols) * rate) KOLs and
gives them, round-robin, one planted case each, so every case appears once there are at least
as many planted KOLs as cases; every other KOL gets a faithful contact. `plant_discrepancies_sql`
is the same idea in DuckDB for the 1M-row benchmark.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterable
from typing import Any

import duckdb
import pycountry


# Planted case -> status of the KOL it is planted on (None: the KOL's own status is unaffected).
CASES = (
    "missing",
    "title_conflict",
    "phone_conflict",
    "institution_conflict",
    "duplicate",
    "email_case",
    "phone_format",
    "country_name",
    "accents",
    "orphan",
    "id_conflict",
    "crm_only",
    "other_email",
    "namesake",
)
_ACCENTED = str.maketrans({"a": "á", "e": "é", "i": "í", "o": "ö", "u": "ü", "n": "ñ"})


def _salesforce_id(rng: random.Random) -> str:
    return "003" + "".join(rng.choices(string.ascii_letters + string.digits, k=15))


def _contact(kol: dict[str, Any], crm_id: str, external_id_field: str) -> dict[str, Any]:
    """A faithful contact of a KOL, keyed by Salesforce API field names."""
    first, _, last = (kol.get("full_name") or "").rpartition(" ")
    location = kol.get("location") or {}
    return {
        "Id": crm_id,
        "FirstName": first or None,
        "LastName": last or None,
        "Email": kol.get("email"),
        "Title": kol.get("title"),
        "Phone": kol.get("phone"),
        "Department": kol.get("department"),
        "Account.Name": kol.get("institution"),
        "MailingCity": location.get("city"),
        "MailingState": location.get("state"),
        "MailingCountry": location.get("country"),
        "LastModifiedDate": "2026-01-01T00:00:00.000+0000",
        external_id_field: kol.get("id"),
    }


def _reformatted_phone(phone: str) -> str:
    """The same number written differently: '+' becomes '00', national numbers get dots."""
    digits = re.sub(r"[^0-9]", "", phone)
    if phone.strip().startswith("+"):
        return "00 " + " ".join(digits[i : i + 3] for i in range(0, len(digits), 3))
    return ".".join(digits[i : i + 3] for i in range(0, len(digits), 3))


def plant_discrepancies(
    kols: Iterable[dict[str, Any]], rate: float, seed: int, external_id_field: str = "KOL_Id__c"
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Contacts for `kols` with planted cases, and the expected status per kol_id and per contact Id.

    KOLs without email alternate: every other one has no contact (no_email), the others a contact with a
    made-up email and no external id: the same person, so a probable match (KOL and contact probable_match). "other_email": the KOL's only contact has a personal
    email and the first name's initial (probable_match); "namesake": no contact for the KOL, but one of
    another person with its name at another institution, city, phone and department (KOL missing_in_crm,
    contact crm_only).
    """
    rng = random.Random(seed)
    kols = list(kols)
    with_email = [i for i, kol in enumerate(kols) if kol.get("email")]
    planted = sorted(rng.sample(with_email, min(len(with_email), round(len(kols) * rate))))
    case_of = {index: CASES[n % len(CASES)] for n, index in enumerate(planted)}
    contacts: list[dict[str, Any]] = []
    expected: dict[str, str] = {}
    own_contact: dict[str, dict[str, Any]] = {}  # kol_id -> the contact carrying its id as external id
    borrowed: set[str] = set()  # KOL ids an id_conflict contact carries instead of its own
    without_email = 0

    def add(contact: dict[str, Any], status: str) -> None:
        contacts.append(contact)
        expected[contact["Id"]] = status

    for index, kol in enumerate(kols):
        kol_id = kol["id"]
        contact = _contact(kol, _salesforce_id(rng), external_id_field)
        if not kol.get("email"):
            without_email += 1
            if without_email % 2:
                expected[kol_id] = "no_email"
                continue
            contact["Email"], contact[external_id_field] = f"{kol_id}@crm-only.example", None
            expected[kol_id] = "probable_match"
            add(contact, "probable_match")
            continue
        case = case_of.get(index)
        if case == "missing":
            expected[kol_id] = "missing_in_crm"
            continue
        status = "matched"
        if case == "title_conflict":
            contact["Title"], status = "Head of " + (kol.get("title") or "Nothing"), "conflict"
        elif case == "phone_conflict":
            contact["Phone"], status = "+1 555 000 " + str(rng.randint(1000, 9999)), "conflict"
        elif case == "institution_conflict":  # not ours to write (the Account's name): matched, differing
            contact["Account.Name"] = (kol.get("institution") or "") + " Annex"
        elif case == "email_case":
            contact["Email"] = "  " + kol["email"].upper() + " "
        elif case == "phone_format" and kol.get("phone"):
            contact["Phone"] = _reformatted_phone(kol["phone"])
        elif case == "country_name" and (kol.get("location") or {}).get("country"):
            country = pycountry.countries.get(alpha_2=kol["location"]["country"])
            contact["MailingCountry"] = country.name if country else contact["MailingCountry"]
        elif case == "accents":
            contact["LastName"] = (contact["LastName"] or "").translate(_ACCENTED)
        elif case == "duplicate":
            twin = dict(contact, Id=_salesforce_id(rng), Email=kol["email"].title(), **{external_id_field: None})
            contact[external_id_field] = None
            add(twin, "duplicate_in_crm")
            status = "duplicate_in_crm"
        elif case == "id_conflict":
            other = kols[(index + 1) % len(kols)]["id"]
            contact[external_id_field], status = other, "id_conflict"
            borrowed.add(other)
        elif case == "orphan":
            add(dict(contact, Id=_salesforce_id(rng), Email=f"orphan.{kol_id}@crm.example",
                     **{external_id_field: "kol_gone_" + kol_id}), "orphan_in_crm")
        elif case == "other_email":
            contact["Email"] = f"{(contact['LastName'] or 'x').lower()}.{kol_id[-4:]}@gmail.com"
            contact["FirstName"] = (contact["FirstName"] or "X")[0] + "."
            contact[external_id_field], status = None, "probable_match"
        elif case == "namesake":
            add(dict(contact, Id=_salesforce_id(rng), Email=f"namesake.{kol_id}@elsewhere.example",
                     **{"Account.Name": "Clinique du Parc", "MailingCity": "Lausanne", "MailingState": None,
                        "MailingCountry": contact["MailingCountry"], "Phone": "+41 21 555 01 99",
                        "Department": "Dermatology", "Title": "Resident", external_id_field: None}), "crm_only")
            expected[kol_id] = "missing_in_crm"
            continue
        elif case == "crm_only":
            add(dict(contact, Id=_salesforce_id(rng), Email=f"stranger.{kol_id}@crm.example",
                     FirstName="Stranger", **{external_id_field: None}), "crm_only")
        expected[kol_id] = status
        add(contact, status)
        if contact.get(external_id_field) == kol_id:
            own_contact[kol_id] = contact
    # The external-id field is unique in Salesforce: the KOL an id_conflict contact names keeps its
    # own contact, matched by email, without the external id.
    for kol_id in borrowed:
        if kol_id in own_contact:
            own_contact[kol_id][external_id_field] = None
    return contacts, expected


def generate_kols_sql(conn: duckdb.DuckDBPyConnection, table: str, n: int, seed: int) -> None:
    """A `kols`-shaped table of n synthetic KOLs (ids kol_<n>, 0.5% without email), built in DuckDB."""
    conn.execute(f"""
CREATE OR REPLACE TABLE {table} AS
SELECT 'kol_' || lpad(i::VARCHAR, 8, '0') AS id,
       f || ' ' || l AS full_name,
       ['Chief of Cardiology', 'Consultant Oncologist', 'Professor of Neurology', 'Attending Surgeon'][1 + h % 4] AS title,
       'Institute ' || (h % 5000)::VARCHAR AS institution,
       ['Cardiology', 'Oncology', 'Neurology', 'Surgery'][1 + (h // 4) % 4] AS department,
       CASE WHEN h % 200 <> 7 THEN lower(f) || '.' || lower(l) || '.' || i::VARCHAR || '@hospital'
            || (h % 997)::VARCHAR || '.org' END AS email,  -- 0.5% without email
       '+1 (' || (200 + h % 700)::VARCHAR || ') 555-' || lpad((i % 10000)::VARCHAR, 4, '0') AS phone,
       {{'city': 'City ' || (h % 3000)::VARCHAR, 'state': 'ST' || (h % 50)::VARCHAR,
         'country': ['US', 'DE', 'GB', 'FR', 'ES'][1 + (h // 16) % 5]}} AS location,
       false AS is_archived
FROM (SELECT i, (hash(i, {seed}) % 1000000007)::BIGINT AS h FROM range({n}) t(i)) s,
     LATERAL (SELECT ['Anna', 'Ben', 'Chloé', 'David', 'Eva', 'Farid', 'Grace', 'Hiro', 'Ines', 'Jonas'][1 + h % 10] AS f,
                     ['Smith', 'Müller', 'Garcia', 'Rossi', 'Dubois', 'Kowalski', 'Nguyen', 'Okafor', 'Jensen',
                      'Silva', 'Ivanova', 'Cohen'][1 + (h // 10) % 12] || (h % 2000)::VARCHAR AS l)""")


def plant_discrepancies_sql(conn: duckdb.DuckDBPyConnection, kols: str, table: str, rate: float, seed: int) -> None:
    """Canonical contacts (resources.crm.mapping.CONTACT_SCHEMA) of a KOL table, with `rate` of them planted:
    missing, conflicting title/phone, duplicate email, case-only email, reformatted phone,
    country as name, orphan external id, id conflict, crm-only; the rest faithful."""
    buckets = round(rate * 10_000)
    conn.execute(f"""
CREATE OR REPLACE TABLE {table} AS
WITH k AS (
  SELECT *, CASE WHEN hash(id, {seed}) % 10000 < {buckets} THEN (hash(id, {seed} + 1) % 9)::INTEGER END AS case_no,
         lead(id) OVER (ORDER BY id) AS next_id
  FROM {kols}
),
base AS (
  SELECT '003' || upper(left(md5(id || '{int(seed)}'), 15)) AS crm_id,
         regexp_extract(full_name, '^(.*) [^ ]+$', 1) AS first_name, regexp_extract(full_name, '([^ ]+)$', 1) AS last_name,
         CASE WHEN email IS NULL THEN 'crm.' || id || '@crm.example'  -- the CRM knows an email we do not
              WHEN case_no = 4 THEN '  ' || upper(email) || ' ' ELSE email END AS email,
         CASE case_no WHEN 1 THEN 'Head of ' || title ELSE title END AS title,
         CASE case_no WHEN 2 THEN '+1 555 000 ' || (hash(id) % 9000 + 1000)::VARCHAR
                      WHEN 5 THEN regexp_replace(phone, '[^0-9]', '.', 'g') ELSE phone END AS phone,
         department, institution, location.city AS city, location.state AS state,
         CASE case_no WHEN 6 THEN CASE location.country WHEN 'US' THEN 'United States' WHEN 'DE' THEN 'Deutschland'
              WHEN 'GB' THEN 'United Kingdom' WHEN 'FR' THEN 'France' ELSE 'Spain' END ELSE location.country END AS country,
         TIMESTAMPTZ '2026-01-01 00:00:00+00' AS last_modified,
         CASE WHEN email IS NULL THEN NULL WHEN case_no = 7 THEN 'kol_gone_' || id WHEN case_no = 8 THEN next_id
              ELSE id END AS external_id,
         NULL::VARCHAR AS custom, case_no, id
  FROM k WHERE case_no IS DISTINCT FROM 0
)
SELECT * EXCLUDE (case_no, id) FROM base
UNION ALL
SELECT '003D' || upper(left(md5(id || 'dup'), 14)), first_name, last_name, lower(email), title, phone, department,
       institution, city, state, country, last_modified, NULL, NULL
FROM base WHERE case_no = 3
UNION ALL
SELECT '003X' || upper(left(md5(id || 'crm'), 14)), 'Stranger', last_name, 'stranger.' || id || '@crm.example', title,
       phone, department, institution, city, state, country, last_modified, NULL, NULL
FROM base WHERE case_no = 2""")


# Latin -> Cyrillic, to write a KOL's name the way a Russian-speaking CRM user might.
_TO_CYRILLIC = str.maketrans({"a": "а", "b": "б", "c": "к", "d": "д", "e": "е", "f": "ф", "g": "г", "h": "х", "i": "и",
                              "j": "дж", "k": "к", "l": "л", "m": "м", "n": "н", "o": "о", "p": "п", "q": "к", "r": "р",
                              "s": "с", "t": "т", "u": "у", "v": "в", "w": "в", "x": "кс", "y": "й", "z": "з"})
# The kinds of "same person, other email" planted by plant_probable_matches, in order.
PROBABLE_KINDS = ("nickname", "initial", "transliteration", "typo", "swapped", "double_surname", "moved", "local_phone")
NICKNAMES = {"Anna": "Annie", "Benjamin": "Ben", "Christopher": "Chris", "David": "Dave", "Elizabeth": "Liz",
             "William": "Bill", "Katherine": "Kate", "Robert": "Bob", "Margaret": "Peggy", "James": "Jim",
             "Michael": "Mike", "Thomas": "Tom", "Richard": "Dick", "Joseph": "Joe", "Daniel": "Dan", "Jennifer": "Jen"}


def _cyrillic(name: str) -> str:
    for latin, cyrillic in (("th", "т"), ("ch", "ч"), ("sh", "ш"), ("ph", "ф")):
        name = name.lower().replace(latin, cyrillic)
    return name.translate(_TO_CYRILLIC).title()


def _local_phone(phone: str | None, country: str | None) -> str | None:
    """A +CC number written the national way (trunk 0 where the country dials one)."""
    if not phone or not phone.startswith("+"):
        return phone
    digits = re.sub(r"[^0-9]", "", phone)
    if digits.startswith("1") and country == "US":
        return f"({digits[1:4]}) {digits[4:7]}-{digits[7:]}"
    for code, trunk in (("49", "0"), ("44", "0"), ("33", "0"), ("39", ""), ("34", ""), ("31", "0")):
        if digits.startswith(code):
            return trunk + digits[len(code):]
    return phone


def plant_probable_matches(kols: Iterable[dict[str, Any]], external_id_field: str = "KOL_Id__c",
                           ) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]], dict[str, str]]:
    """Contacts for `kols` (faithful ones) where one KOL per kind of PROBABLE_KINDS has, instead, a contact
    under another email with that difference, and two other KOLs have a namesake: another person of that
    name at another institution, in another city, with another phone and department. Returns the contacts,
    {kind: (kol_id, contact Id)} of the planted pairs and {namesake contact Id: kol_id it is named after}."""
    rng = random.Random(23)
    kols = [kol for kol in kols if kol.get("email") and kol.get("full_name") and " " in kol["full_name"]]
    contacts = [_contact(kol, _salesforce_id(rng), external_id_field) for kol in kols]
    planted: dict[str, tuple[str, str]] = {}
    used: set[int] = set()
    for kind in PROBABLE_KINDS:
        fits = [i for i in range(len(kols)) if i not in used]
        if kind == "nickname":  # a KOL whose first name has a well-known nickname, renamed to it
            fits = [i for i in fits if kols[i]["full_name"].split()[0] in NICKNAMES] or fits
        index = fits[0]
        used.add(index)
        kol, contact = kols[index], contacts[index]
        first, last = contact["FirstName"] or "", contact["LastName"] or ""
        contact.update({"Email": f"{last.lower() or 'x'}.{first[:1].lower()}{index}@gmail.com", external_id_field: None})
        if kind == "nickname":
            contact["FirstName"] = NICKNAMES.get(first.split()[0], first)
        elif kind == "initial":
            contact["FirstName"] = first[:1] + "."
        elif kind == "transliteration":
            contact["FirstName"], contact["LastName"] = (_cyrillic(first), _cyrillic(last))
        elif kind == "typo" and len(last) > 3:
            contact["LastName"] = last[:2] + last[3] + last[2] + last[4:]
        elif kind == "swapped":
            contact["FirstName"], contact["LastName"] = last, first
        elif kind == "double_surname":
            contact["LastName"] = f"{last}-Moreau"
        elif kind == "moved":  # the CRM still has the former institution and city; the mobile phone stayed
            contact.update({"Account.Name": "Hôpital Saint-Louis", "MailingCity": "Paris", "MailingState": None})
        elif kind == "local_phone":
            contact["Phone"] = _local_phone(kol.get("phone"), (kol.get("location") or {}).get("country"))
        planted[kind] = (kol["id"], contact["Id"])
    namesakes: dict[str, str] = {}
    for kol in [kol for i, kol in enumerate(kols) if i not in used][2:4]:
        twin = _contact(kol, _salesforce_id(rng), external_id_field)
        twin.update({"Email": f"{(twin['LastName'] or 'x').lower()}@clinique-du-lac.example", "Phone": "+41 21 555 01 99",
                     "Account.Name": "Clinique du Lac", "MailingCity": "Lausanne", "MailingState": None,
                     "MailingCountry": "CH", "Department": "Dermatology", "Title": "Resident", external_id_field: None})
        contacts.append(twin)
        namesakes[twin["Id"]] = kol["id"]
    return contacts, planted, namesakes
