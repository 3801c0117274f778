"""A labelled, seeded data set for probable matching: N KOLs and N CRM contacts, and which pairs are one person.

    from benchmarks.crm_people import generate
    truth = generate(conn, n=10_000, seed=1)     # tables kols, contacts, truth_pairs, truth_duplicates

Names come from Faker's per-locale lists (14 countries, Zipf-weighted so that common names are
common), institutions from Faker's cities. Each institution has its own email format
(first.last, flast, f.last, lastf, first_last), domain and phone area. Of the KOLs:

- 80% have a contact with their email (CRM noise: phone written locally, title or department
  missing, the account name abbreviated); 2.5% of all KOLs have a second contact of their own
  under another email: a duplicate within the CRM (truth_duplicates);
- 5% have one contact only, the same person under another email (truth_pairs): personal webmail,
  a former employer's address (the KOL moved: other institution, city and phone, as the CRM
  still has them), a typo in the address, or the institution's other format (j.smith@ for
  john.smith@); and, each independently, a nickname (Bill for William, Pepe for José: partly names
  no nickname table holds), an initial for the first name, another transliteration (Sergej or
  Сергей for Sergey, Mueller for Müller, 王伟 for Wei Wang, Satoh for Sato), a typo in a name,
  first and last name swapped, a double surname cut or hyphenated, the account name abbreviated,
  the phone written locally, missing or another number, title or department missing;
- the other 15% have no contact at all.

Hard negatives, as many as the positives: another person with a KOL's name (80% spelled exactly
the same, 20% with a nickname or initial), at another institution and in another city (in the
same country 80% of the time: a namesake across the world is not a hard case), with their own
phone and email (the local part can be the KOL's own, if both institutions write it alike) and a
specialty drawn at random (so it can be the KOL's). 40% are namesakes of KOLs that have a
contact under another email, 30% of KOLs without a contact, 30% of KOLs whose contact has their
email. The other contacts (8%) are people who are no KOL. 1% of the KOLs have no email.

The proportions were fixed before the matcher was measured against them and are not tuned to it.
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
from anyascii import anyascii
from faker import Faker

# country: (Faker locale, share of KOLs, phone calling code, national prefix or "", script)
COUNTRIES = {
    "US": ("en_US", 0.30, "1", "", "latin"), "DE": ("de_DE", 0.12, "49", "0", "latin"),
    "GB": ("en_GB", 0.08, "44", "0", "latin"), "FR": ("fr_FR", 0.08, "33", "0", "latin"),
    "ES": ("es_ES", 0.07, "34", "", "latin"), "IT": ("it_IT", 0.07, "39", "", "latin"),
    "NL": ("nl_NL", 0.03, "31", "0", "latin"), "PL": ("pl_PL", 0.03, "48", "", "latin"),
    "BR": ("pt_BR", 0.03, "55", "0", "latin"), "RU": ("ru_RU", 0.04, "7", "8", "cyrillic"),
    "GR": ("el_GR", 0.02, "30", "", "greek"), "CN": ("zh_CN", 0.06, "86", "0", "han"),
    "JP": ("ja_JP", 0.05, "81", "0", "japanese"), "TR": ("tr_TR", 0.02, "90", "0", "latin"),
}
DEPARTMENTS = {
    "Cardiology": ["Chief of Cardiology", "Consultant Cardiologist", "Interventional Cardiologist", "Professor of Cardiology"],
    "Oncology": ["Consultant Oncologist", "Head of Oncology", "Professor of Oncology", "Attending Oncologist"],
    "Neurology": ["Professor of Neurology", "Consultant Neurologist", "Head of Neurology"],
    "Surgery": ["Attending Surgeon", "Chief of Surgery", "Consultant Surgeon"],
    "Orthopedics": ["Orthopedic Surgeon", "Head of Orthopedics"], "Radiology": ["Consultant Radiologist", "Head of Radiology"],
    "Nephrology": ["Consultant Nephrologist"], "Endocrinology": ["Endocrinologist", "Head of Endocrinology"],
    "Gastroenterology": ["Gastroenterologist", "Consultant Gastroenterologist"], "Pulmonology": ["Pulmonologist"],
    "Dermatology": ["Dermatologist", "Consultant Dermatologist"], "Urology": ["Urologist", "Head of Urology"],
}
HOSPITAL_FORMS = {
    "US": ["{c} General Hospital", "University of {c} Medical Center", "St. {s} Hospital", "{c} Memorial Hospital"],
    "GB": ["{c} Royal Infirmary", "{c} General Hospital", "St {s}'s Hospital", "University Hospital {c}"],
    "DE": ["Klinikum {c}", "Universitätsklinikum {c}", "St. {s} Krankenhaus {c}", "Städtisches Klinikum {c}"],
    "FR": ["CHU de {c}", "Hôpital {s} de {c}", "Centre Hospitalier de {c}"],
    "ES": ["Hospital Universitario de {c}", "Hospital General de {c}", "Hospital {s} de {c}"],
    "IT": ["Ospedale di {c}", "Azienda Ospedaliera di {c}", "Policlinico di {c}"],
    "NL": ["Ziekenhuis {c}", "Universitair Medisch Centrum {c}"], "PL": ["Szpital Wojewódzki w {c}", "Szpital Miejski {c}"],
    "BR": ["Hospital das Clínicas de {c}", "Hospital {s} de {c}"], "RU": ["City Hospital No. {n}, {c}", "{c} Regional Hospital"],
    "GR": ["General Hospital of {c}", "University Hospital of {c}"], "CN": ["{c} People's Hospital", "{c} First Hospital"],
    "JP": ["{c} University Hospital", "{c} Municipal Hospital"], "TR": ["{c} Devlet Hastanesi", "{c} Üniversitesi Hastanesi"],
}
SAINTS = ["Mary", "Joseph", "Luke", "Anne", "Vincent", "Elisabeth", "John", "Francis", "Thomas", "Martin"]
EMAIL_FORMATS = ("{f}.{l}", "{f0}{l}", "{f0}.{l}", "{l}{f0}", "{f}_{l}", "{l}.{f}")
WEBMAIL = ("gmail.com", "yahoo.com", "outlook.com", "hotmail.com", "gmx.de", "web.de", "orange.fr", "libero.it",
           "yandex.ru", "qq.com", "icloud.com")
# Diminutives the `nicknames` package (English names) does not hold, with the name they stand for.
EUROPEAN_DIMINUTIVES = {
    "José": ["Pepe"], "Francisco": ["Paco", "Curro"], "Ignacio": ["Nacho"], "Dolores": ["Lola"], "Josef": ["Sepp"],
    "Giuseppe": ["Beppe", "Peppe"], "Antonio": ["Toni", "Totò"], "Alexandre": ["Sacha"], "Johannes": ["Hannes"],
    "Wolfgang": ["Wolf"], "Katharina": ["Kathi"], "Elisabeth": ["Lisa", "Sissi"], "Francesco": ["Franco", "Cecco"],
    "Jacques": ["Jacquot"], "Guillermo": ["Memo"], "Enrique": ["Quique"], "Manuel": ["Manolo"], "Teresa": ["Tere"],
    "Jakub": ["Kuba"], "Aleksander": ["Olek"], "Małgorzata": ["Gosia"], "Sergey": ["Seryozha"], "Aleksandr": ["Sasha"],
    "Mikhail": ["Misha"], "Dmitriy": ["Dima"], "Vladimir": ["Volodya"], "Nikolay": ["Kolya"], "Yelena": ["Lena"],
}
# Russian in Latin: the KOL record's scheme (BGN/PCGN-like) and two others a CRM user may type.
CYRILLIC_SCHEMES = {
    "bgn": {"ж": "zh", "х": "kh", "ц": "ts", "ч": "ch", "ш": "sh", "щ": "shch", "ю": "yu", "я": "ya", "й": "y", "ё": "e",
            "ы": "y", "ь": "", "ъ": "", "е": "e", "э": "e"},
    "german": {"ж": "sch", "х": "ch", "ц": "z", "ч": "tsch", "ш": "sch", "щ": "schtsch", "ю": "ju", "я": "ja", "й": "j",
               "ё": "jo", "ы": "y", "ь": "", "ъ": "", "е": "e", "э": "e", "в": "w", "з": "s"},
    "french": {"ж": "j", "х": "kh", "ц": "ts", "ч": "tch", "ш": "ch", "щ": "chtch", "ю": "iou", "я": "ia", "й": "i", "ё": "io",
               "ы": "y", "ь": "", "ъ": "", "е": "e", "э": "e", "у": "ou", "г": "gu"},
}
_CYRILLIC_BASE = dict(zip("абвгдзиклмнопрстуф", "abvgdziklmnoprstuf"))
GREEK = dict(zip("αβγδεζηθικλμνξοπρστυφχψωάέήίόύώϊϋΐΰς",
                 ["a", "v", "g", "d", "e", "z", "i", "th", "i", "k", "l", "m", "n", "x", "o", "p", "r", "s", "t", "y", "f",
                  "ch", "ps", "o", "a", "e", "i", "i", "o", "y", "o", "i", "y", "i", "y", "s"]))
GREEK_ALT = {**GREEK, "υ": "u", "ύ": "u", "χ": "h", "β": "b", "η": "h", "ή": "h"}


@dataclass
class Person:
    first: str  # as the KOL record writes it (Latin)
    last: str
    native_first: str | None  # the name in its own script (Cyrillic, Greek, Han), when it has one
    native_last: str | None
    country: str
    gender: str


def _zipf(rng: np.random.Generator, items: list[str], size: int) -> list[str]:
    """Draws where the k-th most common name is drawn ~1/k^0.9 as often as the first (Faker's lists are
    alphabetical: the ranks are a seeded shuffle)."""
    ranked = [items[i] for i in np.random.default_rng(len(items)).permutation(len(items))]
    weights = 1 / np.arange(1, len(ranked) + 1) ** 0.9
    return [ranked[i] for i in rng.choice(len(ranked), size=size, p=weights / weights.sum())]


def _cyrillic(text: str, scheme: str) -> str:
    table = {**_CYRILLIC_BASE, **CYRILLIC_SCHEMES[scheme]}
    out = "".join(table.get(ch.lower(), ch.lower()) for ch in text)
    return out[:1].upper() + out[1:]


def _greek(text: str, table: dict[str, str]) -> str:
    out = "".join(table.get(ch.lower(), ch.lower()) for ch in text)
    return out[:1].upper() + out[1:]


class Names:
    """Per-country name pools from Faker, drawn with Zipf weights."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.pools: dict[str, dict[str, list[str]]] = {}
        for country, (locale, *_rest) in COUNTRIES.items():
            p = Faker(locale).provider("faker.providers.person")
            get = lambda *names: next(list(getattr(p, n)) for n in names if getattr(p, n, None))  # noqa: E731
            if country == "JP":
                pools = {"m": list(p.first_romanized_names_male), "f": list(p.first_romanized_names_female),
                         "lm": list(p.last_romanized_names), "lf": list(p.last_romanized_names)}
            elif country == "PL":
                pools = {"m": get("first_names_male"), "f": get("first_names_female"),
                         "lm": get("male_last_names", "unisex_last_names"), "lf": get("unisex_last_names", "male_last_names")}
            else:
                pools = {"m": get("first_names_male", "first_names"), "f": get("first_names_female", "first_names"),
                         "lm": get("last_names_male", "last_names"), "lf": get("last_names_female", "last_names")}
            self.pools[country] = pools

    def draw(self, country: str, size: int) -> list[Person]:
        pools = self.pools[country]
        genders = self.rng.choice(["m", "f"], size=size)
        people = []
        firsts = {g: iter(_zipf(self.rng, pools[g], size)) for g in "mf"}
        lasts = {g: iter(_zipf(self.rng, pools["l" + g], 2 * size)) for g in "mf"}
        double = country == "ES"
        for gender in genders:
            first, last = next(firsts[gender]), next(lasts[gender])
            if double and self.rng.random() < 0.5:
                last = f"{last} {next(lasts[gender])}"
            native_first = native_last = None
            script = COUNTRIES[country][4]
            if script == "cyrillic":
                native_first, native_last = first, last
                first, last = _cyrillic(first, "bgn"), _cyrillic(last, "bgn")
            elif script == "greek":
                native_first, native_last = first, last
                first, last = _greek(first, GREEK), _greek(last, GREEK)
            elif script == "han":
                native_first, native_last = first, last
                first, last = anyascii(first).title(), anyascii(last).title()
            people.append(Person(first, last, native_first, native_last, country, gender))
        return people


@dataclass
class Institution:
    name: str
    city: str
    country: str
    domain: str
    email_format: str
    area: str


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", anyascii(text).lower())[:18] or "hospital"


def _ascii_local(text: str) -> str:
    return re.sub(r"[^a-z]", "", anyascii(text).lower())


def institutions(rng: random.Random, n: int) -> dict[str, list[Institution]]:
    """About n / 20 institutions, per country in proportion to its KOLs (fewer where Faker knows few cities)."""
    result: dict[str, list[Institution]] = {}
    for country, (locale, share, *_rest) in COUNTRIES.items():
        faker = Faker(locale)
        faker.seed_instance(rng.randrange(1 << 30))
        count = max(3, round(n / 20 * share))
        seen: set[str] = set()
        made = []
        attempts = 0
        while len(made) < count and attempts < 20 * count:  # a locale with few cities has fewer, bigger institutions
            attempts += 1
            city = anyascii(faker.city()) if COUNTRIES[country][4] != "latin" else faker.city()
            name = rng.choice(HOSPITAL_FORMS[country]).format(c=city, s=rng.choice(SAINTS), n=rng.randint(1, 60))
            if name in seen:
                continue
            seen.add(name)
            domain = f"{_slug(name)[:14]}{len(made)}.{country.lower()}"  # one domain per institution
            made.append(Institution(name, city, country, domain, rng.choice(EMAIL_FORMATS),
                                    str(rng.randint(20, 99))))
        result[country] = made
    return result


def _nicknames() -> dict[str, list[str]]:
    """Canonical name -> nicknames: the `nicknames` package's table (English) and the European diminutives."""
    import csv
    import importlib.resources

    table: dict[str, list[str]] = {}
    with importlib.resources.files("nicknames").joinpath("names.csv").open(encoding="utf-8") as handle:
        for canonical, relation, nickname in csv.reader(handle):
            if relation == "has_nickname" and len(nickname) > 2:
                table.setdefault(canonical, []).append(nickname)
    for name, nicks in EUROPEAN_DIMINUTIVES.items():
        table.setdefault(name.lower(), []).extend(nick.lower() for nick in nicks)
    return table


class Maker:
    """Records of people: a KOL record, a faithful contact, a contact under another email with perturbations."""

    def __init__(self, n: int, seed: int):
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.names = Names(self.np)
        self.places = institutions(self.rng, n)
        self.nicks = _nicknames()
        self.ids: set[str] = set()
        self.emails: set[str] = set()

    def crm_id(self) -> str:
        while True:
            value = "003" + "".join(self.rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", k=15))
            if value not in self.ids:
                self.ids.add(value)
                return value

    def place(self, country: str, other_than: Institution | None = None) -> Institution:
        choices = [p for p in self.places[country] if p is not other_than and (other_than is None or p.city != other_than.city)]
        return self.rng.choice(choices or self.places[country])

    def email(self, first: str, last: str, inst: Institution, form: str | None = None) -> str:
        """An institution's address for a person; a second person of that name there gets a number, as mail
        systems do."""
        f, l_ = _ascii_local(first) or "x", _ascii_local(last) or "x"
        local = (form or inst.email_format).format(f=f, l=l_, f0=f[0])
        address, n = f"{local}@{inst.domain}", 1
        while address in self.emails:
            n += 1
            address = f"{local}{n}@{inst.domain}"
        self.emails.add(address)
        return address

    def phone(self, inst: Institution) -> tuple[str, str]:
        """(number, area) of a new phone at an institution."""
        return "".join(self.rng.choices("0123456789", k=7)), inst.area

    @staticmethod
    def written(number: str, area: str, country: str, local: bool) -> str:
        code, prefix = COUNTRIES[country][2], COUNTRIES[country][3]
        if country == "US":
            area = "6" + area
            return f"({area}) {number[:3]}-{number[3:]}" if local else f"+1 {area} {number[:3]} {number[3:]}"
        return f"{prefix}{area} {number}" if local else f"+{code} {area} {number[:3]} {number[3:]}"

    def person_record(self, person: Person, inst: Institution) -> dict:
        department = self.rng.choice(list(DEPARTMENTS))
        number, area = self.phone(inst)
        return {"person": person, "inst": inst, "department": department, "title": self.rng.choice(DEPARTMENTS[department]),
                "number": number, "area": area, "email": self.email(person.first, person.last, inst)}

    def kol(self, kol_id: str, record: dict, with_email: bool = True) -> dict:
        person, inst = record["person"], record["inst"]
        return {"id": kol_id, "full_name": f"{person.first} {person.last}", "title": record["title"],
                "institution": inst.name, "department": record["department"],
                "email": record["email"] if with_email else None,
                "phone": self.written(record["number"], record["area"], person.country, local=False),
                "location": {"city": inst.city, "state": None, "country": person.country}, "is_archived": False}

    def contact(self, record: dict, external_id: str | None = None) -> dict:
        """The person's contact as the CRM has it, with everyday noise."""
        person, inst, rng = record["person"], record["inst"], self.rng
        return {"crm_id": self.crm_id(), "first_name": person.first, "last_name": person.last,
                "email": record["email"].upper() if rng.random() < 0.05 else record["email"],
                "title": None if rng.random() < 0.15 else record["title"],
                "phone": self.written(record["number"], record["area"], person.country, local=rng.random() < 0.3),
                "department": None if rng.random() < 0.15 else record["department"],
                "institution": self.abbreviated(inst.name) if rng.random() < 0.1 else inst.name,
                "city": inst.city, "state": None, "country": person.country, "external_id": external_id,
                "last_modified": None, "custom": None}

    def abbreviated(self, name: str) -> str:
        words = name.split()
        if len(words) > 2 and self.rng.random() < 0.5:
            return " ".join(w for w in words if w.lower() not in ("of", "de", "di", "the", "hospital", "general"))
        return f"{name} (Main Campus)" if self.rng.random() < 0.5 else name.replace("University", "Univ.").replace("Hospital", "Hosp.")

    def typo(self, word: str) -> str:
        if len(word) < 4:
            return word
        i = self.rng.randrange(1, len(word) - 1)
        kind = self.rng.choice(("swap", "drop", "double", "replace"))
        if kind == "swap":
            return word[:i] + word[i + 1] + word[i] + word[i + 2:]
        if kind == "drop":
            return word[:i] + word[i + 1:]
        if kind == "double":
            return word[:i] + word[i] + word[i:]
        return word[:i] + self.rng.choice("aeiounrst") + word[i + 1:]

    def transliterated(self, person: Person) -> tuple[str, str] | None:
        """The name as another writing would have it, or None when this name has no other writing."""
        script, rng = COUNTRIES[person.country][4], self.rng
        if script == "cyrillic":
            if rng.random() < 0.4:
                return person.native_first, person.native_last
            scheme = rng.choice(("german", "french"))
            return _cyrillic(person.native_first, scheme), _cyrillic(person.native_last, scheme)
        if script == "greek":
            if rng.random() < 0.4:
                return person.native_first, person.native_last
            return _greek(person.native_first, GREEK_ALT), _greek(person.native_last, GREEK_ALT)
        if script == "han":
            return person.native_first, person.native_last  # 伟 / 王 in the CRM's fields
        if script == "japanese":
            long = lambda w: w + rng.choice(("h", "u")) if w.endswith("o") else w.replace("u", "uu", 1)  # noqa: E731
            return long(person.first), long(person.last)
        german = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "ß": "ss", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue"})
        first, last = person.first.translate(german), person.last.translate(german)
        if (first, last) == (person.first, person.last):
            first = "".join(c for c in unicodedata.normalize("NFKD", first) if not unicodedata.combining(c))
            last = "".join(c for c in unicodedata.normalize("NFKD", last) if not unicodedata.combining(c))
        return None if (first, last) == (person.first, person.last) else (first, last)

    def other_email_contact(self, record: dict) -> tuple[dict, list[str]]:
        """The person's contact under another email, with independent perturbations; returns it and their names."""
        rng, person = self.rng, record["person"]
        contact = self.contact(record)
        applied = []
        first, last = person.first, person.last
        nicks = self.nicks.get(first.lower())
        if nicks and rng.random() < 0.25:
            first, applied = rng.choice(nicks).title(), applied + ["nickname"]
        elif rng.random() < 0.1:
            first, applied = first[0] + rng.choice((".", "")), applied + ["initial"]
        if rng.random() < 0.2 and (other := self.transliterated(person)):
            first = other[0] if "nickname" not in applied and "initial" not in applied else first
            last, applied = other[1], applied + ["transliteration"]
        if rng.random() < 0.15:
            if rng.random() < 0.5:
                last = self.typo(last)
            else:
                first = self.typo(first)
            applied.append("typo")
        if " " in last and rng.random() < 0.5:
            last, applied = (last.replace(" ", "-") if rng.random() < 0.5 else last.split()[0]), applied + ["double_surname"]
        elif rng.random() < 0.04:
            last, applied = f"{last}-{self.names.draw(person.country, 1)[0].last}", applied + ["double_surname"]
        if rng.random() < 0.05:
            first, last, applied = last, first, applied + ["swapped"]
        contact.update(first_name=first, last_name=last)
        kind = rng.choices(("webmail", "former_employer", "typo", "other_format"), weights=(40, 20, 20, 20))[0]
        if kind == "former_employer":  # the KOL moved: the CRM still has the old place, address and, mostly, phone
            old = self.place(person.country, other_than=record["inst"])
            contact.update(institution=old.name, city=old.city, email=self.email(person.first, person.last, old))
            if rng.random() < 0.6:
                number, area = self.phone(old)
                contact["phone"] = self.written(number, area, person.country, local=rng.random() < 0.5)
            applied.append("moved")
        elif kind == "webmail":
            local = rng.choice(EMAIL_FORMATS).format(f=_ascii_local(person.first), l=_ascii_local(person.last),
                                                      f0=_ascii_local(person.first)[:1])
            contact["email"] = local + (str(rng.randint(1, 99)) if rng.random() < 0.5 else "") + "@" + rng.choice(WEBMAIL)
        elif kind == "typo":
            local, domain = record["email"].split("@")
            contact["email"] = self.typo(local) + "@" + domain
            if contact["email"] == record["email"]:
                contact["email"] = local + "1@" + domain
        else:
            forms = [f for f in EMAIL_FORMATS if f != record["inst"].email_format]
            contact["email"] = self.email(person.first, person.last, record["inst"], rng.choice(forms))
        applied.append("email_" + kind)
        if "moved" not in applied:
            roll = rng.random()
            if roll < 0.2:
                contact["phone"] = None
            elif roll < 0.3:
                number, area = self.phone(record["inst"])
                contact["phone"] = self.written(number, area, person.country, local=True)
            elif roll < 0.7:
                contact["phone"] = self.written(record["number"], record["area"], person.country, local=True)
        return contact, applied

    def namesake(self, record: dict) -> dict:
        """Another person with the KOL's name, elsewhere."""
        rng, person = self.rng, record["person"]
        country = person.country if rng.random() < 0.8 else rng.choice(list(COUNTRIES))
        inst = self.place(country, other_than=record["inst"])
        first = person.first
        if rng.random() < 0.2:
            nicks = self.nicks.get(first.lower())
            first = rng.choice(nicks).title() if nicks and rng.random() < 0.5 else first[0] + "."
        other = Person(first, person.last, person.native_first, person.native_last, country, person.gender)
        twin = self.person_record(other, inst)
        self.emails.discard(twin["email"])  # replaced below: the twin's own first try must not make it "…2@"
        twin["email"] = self.email(person.first, person.last, inst)
        return self.contact(twin)


KOL_SCHEMA = pa.schema([
    ("id", pa.string()), ("full_name", pa.string()), ("title", pa.string()), ("institution", pa.string()),
    ("department", pa.string()), ("email", pa.string()), ("phone", pa.string()),
    ("location", pa.struct([("city", pa.string()), ("state", pa.string()), ("country", pa.string())])),
    ("is_archived", pa.bool_()),
])


def generate(conn: duckdb.DuckDBPyConnection, n: int, seed: int) -> dict[str, int]:
    """Tables kols, contacts (canonical columns), truth_pairs (kol_id, crm_id, kind) and truth_duplicates
    (a, b) on conn; returns the counts of each kind of record."""
    from resources.crm.mapping import CONTACT_SCHEMA

    maker = Maker(n, seed)
    rng = maker.rng
    people: list[Person] = []
    for country, (_, share, *_rest) in COUNTRIES.items():
        people.extend(maker.names.draw(country, round(n * share)))
    people = (people * 2)[:n] if len(people) < n else people[:n]
    rng.shuffle(people)
    records = [maker.person_record(p, rng.choice(maker.places[p.country])) for p in people]
    order = list(range(n))
    rng.shuffle(order)
    matched_end, positive_end = round(0.80 * n), round(0.85 * n)
    matched, positives, missing = order[:matched_end], order[matched_end:positive_end], order[positive_end:]
    duplicated = set(rng.sample(matched, round(0.025 * n)))
    no_email = set(rng.sample(positives + missing, round(0.01 * n)))
    kols, contacts, pairs, dups, kinds = [], [], [], [], []
    for i, record in enumerate(records):
        kols.append(maker.kol(f"kol_{i:07d}", record, with_email=i not in no_email))
    for i in matched:
        contact = maker.contact(records[i], external_id=kols[i]["id"] if rng.random() < 0.5 else None)
        contacts.append(contact)
        if i in duplicated:
            twin, applied = maker.other_email_contact(records[i])
            contacts.append(twin)
            dups.append((contact["crm_id"], twin["crm_id"]))
    for i in positives:
        contact, applied = maker.other_email_contact(records[i])
        contacts.append(contact)
        pairs.append((kols[i]["id"], contact["crm_id"], ",".join(applied)))
    targets = (rng.sample(positives, round(0.4 * 0.05 * n)) + rng.sample(missing, round(0.3 * 0.05 * n))
               + rng.sample(matched, round(0.3 * 0.05 * n)))
    namesakes = [maker.namesake(records[i]) for i in targets]
    contacts.extend(namesakes)
    others = n - len(contacts)
    strangers = []
    for country, (_, share, *_rest) in COUNTRIES.items():
        strangers.extend(maker.names.draw(country, max(0, round(others * share))))
    for person in strangers[:max(0, others)]:
        contacts.append(maker.contact(maker.person_record(person, rng.choice(maker.places[person.country]))))
    kol_arrow = pa.Table.from_pylist(kols, schema=KOL_SCHEMA)
    contact_arrow = pa.Table.from_pylist(contacts, schema=CONTACT_SCHEMA)
    pair_arrow = pa.table({"kol_id": [p[0] for p in pairs], "crm_id": [p[1] for p in pairs], "kind": [p[2] for p in pairs]})
    dup_arrow = pa.table({"a": [d[0] for d in dups], "b": [d[1] for d in dups]})
    for name, table in (("kols", kol_arrow), ("contacts", contact_arrow), ("truth_pairs", pair_arrow),
                        ("truth_duplicates", dup_arrow)):
        conn.register(f"{name}_arrow", table)
        conn.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")
        conn.unregister(f"{name}_arrow")
    return {"kols": n, "contacts": len(contacts), "positives": len(pairs), "duplicates": len(dups),
            "namesakes": len(namesakes), "strangers": len(contacts) - len(matched) - len(dups) - len(pairs) - len(namesakes)}
