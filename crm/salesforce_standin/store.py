"""The stand-in org's data: Contacts and the Accounts they reference, in memory, behind one lock.

Records are flat dicts keyed by API field name (AccountId, not Account.Name); relationship
fields are resolved at read time, so renaming an Account shows on every Contact as in
Salesforce. Ids are 18-character Salesforce ids (key prefix 003 / 001) issued in ascending
order, so ORDER BY Id is creation order. Date-times are aware UTC datetimes of whole seconds, as Salesforce
keeps them (its API shows .000), from the store's `clock` (tests may set it).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timezone

from crm.salesforce_standin.soql import BoolOp, Comparison, Not, Query, SoqlError, like_matcher

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
CHECKSUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str  # id, string, email, phone, reference, datetime, boolean
    label: str
    createable: bool = True
    updateable: bool = True
    nillable: bool = True
    external_id: bool = False
    unique: bool = False
    relationship_name: str | None = None
    length: int = 255


STANDARD_FIELDS = (
    FieldSpec("Id", "id", "Contact ID", createable=False, updateable=False, nillable=False, length=18),
    FieldSpec("IsDeleted", "boolean", "Deleted", createable=False, updateable=False, nillable=False),
    FieldSpec("AccountId", "reference", "Account ID", relationship_name="Account", length=18),
    FieldSpec("FirstName", "string", "First Name", length=40),
    FieldSpec("LastName", "string", "Last Name", nillable=False, length=80),
    FieldSpec("Email", "email", "Email", length=80),
    FieldSpec("Title", "string", "Title", length=128),
    FieldSpec("Phone", "phone", "Business Phone", length=40),
    FieldSpec("Department", "string", "Department", length=80),
    FieldSpec("MailingCity", "string", "Mailing City", length=40),
    FieldSpec("MailingState", "string", "Mailing State/Province", length=80),
    FieldSpec("MailingCountry", "string", "Mailing Country", length=80),
    FieldSpec("CreatedDate", "datetime", "Created Date", createable=False, updateable=False, nillable=False),
    FieldSpec("LastModifiedDate", "datetime", "Last Modified Date", createable=False, updateable=False, nillable=False),
    FieldSpec("SystemModstamp", "datetime", "System Modstamp", createable=False, updateable=False, nillable=False),
)
ACCOUNT_FIELDS = {"Id": FieldSpec("Id", "id", "Account ID"), "Name": FieldSpec("Name", "string", "Account Name")}


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class StoreError(Exception):
    """A write Salesforce would refuse; `code` is its errorCode, `fields` the fields concerned."""

    def __init__(self, code: str, message: str, fields: Iterable[str] = (), status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = list(fields)
        self.status = status


def salesforce_id(prefix: str, number: int) -> str:
    """An 18-character id: prefix + org pod + base-62 counter + the case-safe checksum suffix."""
    digits = []
    for _ in range(9):
        number, remainder = divmod(number, 62)
        digits.append(BASE62[remainder])
    short = prefix + "5g0" + "".join(reversed(digits))
    suffix = ""
    for chunk in range(3):
        bits = sum(1 << i for i, char in enumerate(short[chunk * 5:chunk * 5 + 5]) if char.isupper())
        suffix += CHECKSUM[bits]
    return short + suffix


def format_datetime(value: datetime) -> str:
    """Salesforce's REST format: 2024-01-31T10:00:00.000+0000."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}+0000"


class ContactStore:
    """Thread-safe Contacts and Accounts. Emails are lower-cased on save; the external-id field
    (when the org has one) is unique, case-insensitively, as Salesforce's unique text fields are."""

    def __init__(self, external_id_field: str | None = "KOL_Id__c", custom_fields: Iterable[str] = (),
                 clock: Callable[[], datetime] = utc_now):
        self.lock = threading.RLock()
        self.clock = clock
        self.external_id_field = external_id_field
        fields = list(STANDARD_FIELDS)
        if external_id_field:
            fields.append(FieldSpec(external_id_field, "string", "KOL Id", external_id=True, unique=True))
        fields.extend(FieldSpec(name, "string", name.removesuffix("__c").replace("_", " ")) for name in custom_fields)
        self.fields: dict[str, FieldSpec] = {spec.name: spec for spec in fields}
        self._lower_fields = {name.lower(): name for name in self.fields}
        self.contacts: dict[str, dict] = {}
        self.accounts: dict[str, dict] = {}
        self._account_by_name: dict[str, str] = {}
        self._by_external_id: dict[str, str] = {}
        self._contact_numbers = itertools.count(1)
        # SystemModstamp indexed, as Salesforce indexes it: (stamp, creation number, id) each time a contact's is set,
        # so that a query for the contacts changed since a time reads those, not every contact. Entries a later
        # stamp superseded stay; a query checks each record it finds. Appended in time order unless the clock went
        # back (then queries scan every contact).
        self._stamps: list[tuple[datetime, int, str]] = []
        self._stamps_ordered = True
        self._created: dict[str, int] = {}
        self._account_numbers = itertools.count(1)

    def now(self) -> datetime:
        """The org's time, to the second: what a save stamps and what the API's Date header says."""
        return self.clock().astimezone(timezone.utc).replace(microsecond=0)

    # --- field names ---------------------------------------------------------------------------------

    def canonical_field(self, path: str) -> str:
        """The field's API name as Salesforce spells it (names are case-insensitive); INVALID_FIELD otherwise."""
        if "." in path:
            relationship, _, name = path.partition(".")
            account_field = {key.lower(): key for key in ACCOUNT_FIELDS}.get(name.lower())
            if relationship.lower() != "account" or account_field is None:
                raise SoqlError(f"No such column '{path}' on entity 'Contact'. If you are attempting to use a custom "
                                "field, be sure to append the '__c' after the custom field name.", "INVALID_FIELD")
            return f"Account.{account_field}"
        name = self._lower_fields.get(path.lower())
        if name is None:
            raise SoqlError(f"No such column '{path}' on entity 'Contact'. If you are attempting to use a custom "
                            "field, be sure to append the '__c' after the custom field name.", "INVALID_FIELD")
        return name

    def value(self, record: dict, path: str) -> object:
        """A field's value on a contact record; Account.* follows AccountId."""
        if path.startswith("Account."):
            account = self.accounts.get(record.get("AccountId") or "")
            return None if account is None else account.get(path.partition(".")[2])
        return record.get(path)

    def field_spec(self, path: str) -> FieldSpec:
        """The spec of a canonical field name (Account.* names an Account field)."""
        return self.fields.get(path) or ACCOUNT_FIELDS[path.partition(".")[2]]

    def getter(self, path: str) -> Callable[[dict], object]:
        """`value` for one field, resolved once (a Bulk 2.0 result reads a field of every record)."""
        if path.startswith("Account."):
            accounts, name = self.accounts, path.partition(".")[2]
            return lambda record: (accounts.get(record.get("AccountId") or "") or {}).get(name)
        return lambda record: record.get(path)

    # --- writes --------------------------------------------------------------------------------------

    def account_id_for(self, name: str) -> str:
        """The Account of that name, created when new (how seeding gives `Account.Name`)."""
        with self.lock:
            key = name.strip().lower()
            if key not in self._account_by_name:
                account_id = salesforce_id("001", next(self._account_numbers))
                self.accounts[account_id] = {"Id": account_id, "Name": name.strip()}
                self._account_by_name[key] = account_id
            return self._account_by_name[key]

    def _clean(self, data: dict, creating: bool, seeding: bool = False) -> dict:
        """Validated field values for a write: known, writable fields; emails lower-cased; '' is null.
        Only seeding may name the Account by `Account.Name` (the API writes AccountId)."""
        values: dict = {}
        for key, raw in data.items():
            if key == "attributes":
                continue
            if key == "Account.Name" and seeding:
                name = raw.get("Name") if isinstance(raw, dict) else raw
                values["AccountId"] = self.account_id_for(name) if name else None
                continue
            spec = self.fields.get(key) or self.fields.get(self._lower_fields.get(key.lower(), ""))
            if spec is None:
                raise StoreError("INVALID_FIELD", f"No such column '{key}' on sobject of type Contact", [key])
            if not (spec.createable if creating else spec.updateable):
                raise StoreError("INVALID_FIELD_FOR_INSERT_UPDATE",
                                 f"Unable to create/update fields: {spec.name}. Please check the security settings of "
                                 "this field and verify that it is read/write for your profile or permission set.", [spec.name])
            value = None if raw in ("", None) else raw
            if value is not None and spec.type == "reference" and value not in self.accounts:
                raise StoreError("INVALID_CROSS_REFERENCE_KEY", "invalid cross reference id", [spec.name])
            if value is not None and spec.type == "email":
                value = str(value).strip().lower()
            if value is not None and not isinstance(value, (str, bool, int, float)):
                raise StoreError("JSON_PARSER_ERROR", f"Cannot deserialize value of field {spec.name}", [spec.name])
            if isinstance(value, str) and len(value) > spec.length:
                raise StoreError("STRING_TOO_LONG", f"{spec.label}: data value too large: {value[:20]}... "
                                 f"(max length={spec.length})", [spec.name])
            values[spec.name] = value
        return values

    def _check_external_id(self, values: dict, own_id: str | None) -> None:
        field = self.external_id_field
        if field and values.get(field) is not None:
            holder = self._by_external_id.get(str(values[field]).lower())
            if holder is not None and holder != own_id:
                raise StoreError("DUPLICATE_VALUE", f"duplicate value found: {field} duplicates value on record with "
                                 f"id: {holder}", [field])

    def _index(self, record: dict, old_external: object) -> None:
        field = self.external_id_field
        if not field:
            return
        if old_external is not None:
            self._by_external_id.pop(str(old_external).lower(), None)
        if record.get(field) is not None:
            self._by_external_id[str(record[field]).lower()] = record["Id"]

    def create(self, data: dict, now: datetime | None = None, seeding: bool = False) -> str:
        with self.lock:
            values = self._clean(data, creating=True, seeding=seeding)
            if not values.get("LastName"):
                raise StoreError("REQUIRED_FIELD_MISSING", "Required fields are missing: [LastName]", ["LastName"])
            self._check_external_id(values, None)
            now = now or self.now()
            contact_id = salesforce_id("003", next(self._contact_numbers))
            record = {name: None for name in self.fields}
            record.update(values, Id=contact_id, IsDeleted=False, CreatedDate=now, LastModifiedDate=now, SystemModstamp=now)
            self.contacts[contact_id] = record
            self._created[contact_id] = len(self._created)
            self._index(record, None)
            self._stamped(contact_id, now)
            return contact_id

    def update(self, contact_id: str, data: dict) -> None:
        with self.lock:
            record = self.contacts.get(contact_id)
            if record is None:
                raise StoreError("NOT_FOUND", "The requested resource does not exist", status=404)
            values = self._clean(data, creating=False)
            if "LastName" in values and not values["LastName"]:
                raise StoreError("REQUIRED_FIELD_MISSING", "Required fields are missing: [LastName]", ["LastName"])
            self._check_external_id(values, contact_id)
            old_external = record.get(self.external_id_field) if self.external_id_field else None
            now = self.now()
            record.update(values, LastModifiedDate=now, SystemModstamp=now)
            self._index(record, old_external)
            self._stamped(contact_id, now)

    def delete(self, contact_id: str) -> None:
        """Move a contact to the recycle bin, as Salesforce's delete does: IsDeleted, SystemModstamp moves; only
        queryAll sees it from then on."""
        with self.lock:
            record = self.contacts.get(contact_id)
            if record is None or record["IsDeleted"]:
                raise StoreError("NOT_FOUND", "The requested resource does not exist", status=404)
            record.update(IsDeleted=True, SystemModstamp=self.now())
            self._index({}, record.get(self.external_id_field) if self.external_id_field else None)
            self._stamped(contact_id, record["SystemModstamp"])

    def upsert(self, field: str, key: str, data: dict) -> tuple[str, bool]:
        """(id, created) of an upsert by external id (or Id); 300 MULTIPLE_CHOICES when several match."""
        with self.lock:
            name = self.canonical_field(field)
            spec = self.fields[name]
            if not (spec.external_id or name == "Id"):
                raise StoreError("NOT_FOUND", f"Provided external ID field does not exist or is not accessible: {field}", status=404)
            data = {k: v for k, v in data.items() if k.lower() != name.lower()}
            if name == "Id":
                self.update(key, data)
                return key, False
            matches = [record["Id"] for record in self.contacts.values()
                       if record.get(name) is not None and str(record[name]).lower() == key.lower()]
            if len(matches) > 1:
                raise StoreError("MULTIPLE_CHOICES", f"more than one record found for external id field {name}", status=300)
            if matches:
                self.update(matches[0], data)
                return matches[0], False
            return self.create({**data, name: key}), True

    # --- reads ---------------------------------------------------------------------------------------

    def run(self, query: Query, include_deleted: bool = False) -> tuple[list[str], list[dict]]:
        """(selected field names as Salesforce spells them, matching records) of a parsed query."""
        if query.object_name.lower() != "contact":
            raise SoqlError(f"sObject type '{query.object_name}' is not supported.", "INVALID_TYPE")
        fields = [self.canonical_field(name) for name in query.fields]
        condition = self._compile(query.where) if query.where is not None else None
        order = [(self.canonical_field(key.field), key) for key in query.order_by]
        with self.lock:
            records = [record for record in self._candidates(query.where)
                       if (include_deleted or not record["IsDeleted"]) and (condition is None or condition(record))]
        for name, key in reversed(order):  # stable sorts, last key first
            present = [r for r in records if self.value(r, name) is not None]
            missing = [r for r in records if self.value(r, name) is None]
            exact = self._exact(name)
            present.sort(key=lambda r: _sort_key(self.value(r, name), exact), reverse=key.descending)
            records = missing + present if key.nulls_first else present + missing
        records = records[query.offset:]
        if query.limit is not None:
            records = records[:query.limit]
        return fields, records

    def _stamped(self, contact_id: str, stamp: datetime) -> None:
        if self._stamps and stamp < self._stamps[-1][0]:
            self._stamps_ordered = False
        self._stamps.append((stamp, self._created[contact_id], contact_id))

    def _candidates(self, where: object) -> Iterable[dict]:
        """The contacts a WHERE can match, in creation order: those stamped at or after its SystemModstamp >= (or >)
        bound when it has one at its top (alone or in an AND), else every contact."""
        operands = where.operands if isinstance(where, BoolOp) and where.operator == "AND" else [where]
        bounds = [node.value for node in operands if isinstance(node, Comparison) and node.operator in (">=", ">")
                  and node.value is not None and self._lower_fields.get(node.field.lower()) == "SystemModstamp"]
        if not bounds or not self._stamps_ordered:
            return self.contacts.values()
        since = max(_coerce(self.fields["SystemModstamp"], "SystemModstamp", bound) for bound in bounds)
        found = {entry[1]: entry[2] for entry in self._stamps[bisect.bisect_left(self._stamps, (since,)):]}
        return [self.contacts[found[number]] for number in sorted(found)]

    def _compile(self, node: object):
        """A predicate over a record for a WHERE tree (fields checked once, here)."""
        if isinstance(node, BoolOp):
            parts = [self._compile(operand) for operand in node.operands]
            return (lambda r: all(p(r) for p in parts)) if node.operator == "AND" else (lambda r: any(p(r) for p in parts))
        if isinstance(node, Not):
            inner = self._compile(node.operand)
            return lambda r: not inner(r)
        assert isinstance(node, Comparison)
        name = self.canonical_field(node.field)
        spec = self.field_spec(name)
        if node.operator == "LIKE":
            if spec.type in ("datetime", "boolean"):
                raise SoqlError(f"invalid operator on {spec.type} field {name}: LIKE", "INVALID_FIELD")
            matches = like_matcher(node.value)
            return lambda r: (v := self.value(r, name)) is not None and matches(str(v))
        values = node.value if node.operator in ("IN", "NOT IN") else (node.value,)
        literals = [_coerce(spec, name, value) for value in values]
        exact = self._exact(name)
        if node.operator in ("IN", "NOT IN"):
            wanted = {_sort_key(v, exact) for v in literals if v is not None}
            inside = lambda r: (v := self.value(r, name)) is not None and _sort_key(v, exact) in wanted  # noqa: E731
            return inside if node.operator == "IN" else (lambda r: not inside(r))
        literal = literals[0]
        if literal is None:
            if node.operator not in ("=", "!="):
                raise SoqlError(f"null can only be compared with = or != (field {name})")
            return (lambda r: self.value(r, name) is None) if node.operator == "=" else (lambda r: self.value(r, name) is not None)
        key = _sort_key(literal, exact)
        compare = {
            "=": lambda a: a == key, "!=": lambda a: a != key, "<": lambda a: a < key,
            "<=": lambda a: a <= key, ">": lambda a: a > key, ">=": lambda a: a >= key,
        }[node.operator]
        if node.operator == "!=":
            return lambda r: (v := self.value(r, name)) is None or compare(_sort_key(v, exact))
        return lambda r: (v := self.value(r, name)) is not None and compare(_sort_key(v, exact))

    def _exact(self, name: str) -> bool:
        """Ids compare and sort case-sensitively (they are case-sensitive); text does not."""
        spec = self.fields.get(name) or ACCOUNT_FIELDS[name.partition(".")[2]]
        return spec.type in ("id", "reference")

    def iter_contacts(self) -> Iterator[dict]:
        with self.lock:
            records = list(self.contacts.values())
        yield from records


def _coerce(spec: FieldSpec, name: str, value: object) -> object:
    """A literal checked against the field's type, as Salesforce does before running a query."""
    if value is None:
        return None
    if spec.type == "datetime":
        if isinstance(value, datetime):
            return value
        if isinstance(value, date):
            return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
        raise SoqlError(f"value of filter criterion for field '{name}' must be of type dateTime and should not be "
                        "enclosed in quotes", "INVALID_FIELD")
    if spec.type == "boolean":
        if isinstance(value, bool):
            return value
        raise SoqlError(f"value of filter criterion for field '{name}' must be of type boolean and should not be "
                        "enclosed in quotes", "INVALID_FIELD")
    if not isinstance(value, str):
        raise SoqlError(f"value of filter criterion for field '{name}' must be of type string and should be "
                        "enclosed in quotes", "INVALID_FIELD")
    return value


def _sort_key(value: object, exact: bool = False) -> object:
    """Text compares case-insensitively in SOQL; ids and other types as they are."""
    return value.lower() if isinstance(value, str) and not exact else value
