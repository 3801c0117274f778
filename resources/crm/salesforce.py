"""Salesforce contacts as a Dagster resource, on simple-salesforce as it is published.

Reads stream: REST query pages (2,000 records) or, above `bulk_threshold` contacts (decided by
a SELECT COUNT() first), Bulk 2.0 CSV pages; either way one RecordBatch at a time, never the
whole result in memory. An extract also says where the next one starts: Salesforce's time when it
began (the Date header of its COUNT() answer). Writes return one WriteResult per row for the audit trail. Every
failure that stops a run is a CrmError with one line naming what to set; secrets never appear.
"""

from __future__ import annotations

import csv
import io
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import requests
from pydantic import Field, PrivateAttr
from requests.adapters import HTTPAdapter
from simple_salesforce import Salesforce, SalesforceLogin, format_soql
from simple_salesforce.exceptions import (
    SalesforceAuthenticationFailed,
    SalesforceError,
    SalesforceExpiredSession,
    SalesforceMalformedRequest,
    SalesforceMoreThanOneRecord,
    SalesforceRefusedRequest,
    SalesforceResourceNotFound,
)
from urllib3.util.retry import Retry

from resources.crm.base import MappedCrmResource, WriteResult
from resources.crm.errors import CrmError
from resources.crm.mapping import (CHANGE_FIELDS, CHANGES_SCHEMA, CONTACT_SCHEMA, ContactMapping, parse_custom_fields,
                                   parse_datetime, timestamps, to_batch)

T = TypeVar("T")
CREDENTIALS_HINT = "check SALESFORCE_USERNAME, SALESFORCE_PASSWORD and SALESFORCE_SECURITY_TOKEN"
NOT_RENEWABLE = ("Salesforce session expired and cannot be renewed: set SALESFORCE_USERNAME/SALESFORCE_PASSWORD/"
                 "SALESFORCE_SECURITY_TOKEN or a fresh SALESFORCE_SESSION_ID")


class _TimeoutAdapter(HTTPAdapter):
    """Fills in a timeout on every request: simple-salesforce sends none, and a stalled socket would hang a run."""

    def __init__(self, timeout: float, **kwargs: Any):
        self._timeout = timeout
        super().__init__(**kwargs)

    def send(self, request, timeout=None, **kwargs):  # noqa: ANN001 - requests' signature
        return super().send(request, timeout=self._timeout if timeout is None else timeout, **kwargs)


def http_session(ca_bundle: str | None, timeout: float, max_retries: int) -> requests.Session:
    """The requests Session handed to simple-salesforce.

    trust_env is off: REQUESTS_CA_BUNDLE (set on this machine) would otherwise override `verify`, and
    proxies from the environment would apply unasked. Retries cover connect/read errors and 502/503/504
    with backoff and Retry-After, for idempotent methods only (a retried POST could create twice); not TLS
    failures (other=0), which no retry heals."""
    session = requests.Session()
    session.trust_env = False
    session.verify = ca_bundle or True
    retry = Retry(total=max_retries, connect=max_retries, read=max_retries, status=max_retries, other=0,
                  status_forcelist=(502, 503, 504), backoff_factor=0.5, respect_retry_after_header=True,
                  raise_on_status=False)
    adapter = _TimeoutAdapter(timeout, max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


# The Date header comes from Salesforce's web tier, the stamps from its app servers: a second's margin covers
# their clocks drifting apart (a night then reads again the few saves of the second before the last extract began).
CLOCK_MARGIN = timedelta(seconds=1)


class ContactChanges:
    """One extract's CHANGES_SCHEMA batches (iterate once) and, once they are read, `watermark`: where the next
    extract starts. That is Salesforce's time when this one began, to the second and less CLOCK_MARGIN, from the
    Date header of its COUNT() answer: a save stamped before it was committed before the extract's query ran, so
    the query read it, and any later save, in that very second too, is stamped at or after it. Without a Date
    header, the latest SystemModstamp read (whose second is then read again)."""

    def __init__(self, batches: Callable[[ContactChanges], Iterator[pa.RecordBatch]]):
        self._batches = batches(self)
        self.began: datetime | None = None  # set by the resource on the COUNT() answer
        self._latest: datetime | None = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            latest = pc.max(batch.column("system_modstamp")).as_py()
            self._latest = max(filter(None, (self._latest, latest)), default=None)
            yield batch

    @property
    def watermark(self) -> datetime | None:
        return self.began or self._latest


class SalesforceResource(MappedCrmResource):
    """Salesforce Contacts. Log in with username + password + security token (`domain`, or `login_url` for a
    non-standard host), or give `instance_url` + `session_id`. Secrets only as dg.EnvVar("SALESFORCE_PASSWORD"),
    dg.EnvVar("SALESFORCE_SECURITY_TOKEN"), dg.EnvVar("SALESFORCE_SESSION_ID"); never logged."""

    username: str | None = Field(default=None, description="Login user (SALESFORCE_USERNAME).")
    password: str | None = Field(default=None, repr=False, description="Password (SALESFORCE_PASSWORD); never logged.")
    security_token: str | None = Field(default=None, repr=False, description="Security token (SALESFORCE_SECURITY_TOKEN).")
    domain: str = Field(default="login", description="Login domain: login, test or a My Domain (SALESFORCE_DOMAIN).")
    login_url: str | None = Field(default=None, description="Login host for a non-standard domain, https://... (SALESFORCE_LOGIN_URL).")
    instance_url: str | None = Field(default=None, description="Instance URL for session-id access (SALESFORCE_INSTANCE_URL).")
    session_id: str | None = Field(default=None, repr=False, description="Session id (SALESFORCE_SESSION_ID); never logged.")
    api_version: str = Field(default="59.0", description="REST API version without the v (SALESFORCE_API_VERSION).")
    ca_bundle: str | None = Field(default=None, description="PEM file of CAs to trust instead of the system store (SALESFORCE_CA_BUNDLE).")
    timeout_seconds: float = Field(default=60.0, description="Timeout of each HTTP request.")
    max_retries: int = Field(default=3, description="Retries after connect/read errors and 502/503/504.")
    bulk_threshold: int = Field(default=10_000, description="Record count above which reads and writes use Bulk API 2.0.")
    # simple-salesforce's pauses grow as a job runs (wait + e^n ms, until one passes its 2 s cap): from 0.5 s, a
    # small job is answered within about a second, and a long one is polled every 3.5 s after its first 10 s
    # (from 2 s, every 2 s from the start).
    bulk_wait_seconds: float = Field(default=0.5, description="First pause before polling a Bulk 2.0 job (each poll "
                                                             "is an API call); later pauses grow.")

    _client: Salesforce | None = PrivateAttr(default=None)
    _http: requests.Session | None = PrivateAttr(default=None)
    _mapping: ContactMapping | None = PrivateAttr(default=None)
    _server_time: datetime | None = PrivateAttr(default=None)

    # --- connection ----------------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return True

    @property
    def source_name(self) -> str:
        return f"salesforce {self.instance_url or self.login_url or f'https://{self.domain}.salesforce.com'}"

    @property
    def record_base_url(self) -> str:
        """https://<instance> of the org, where its records open (the login tells it)."""
        return f"https://{self._call(lambda sf: sf.sf_instance)}"

    @property
    def _can_login(self) -> bool:
        return bool(self.username and self.password)

    def _login_host(self) -> str:
        return (self.login_url or f"https://{self.domain}.salesforce.com").rstrip("/")

    def _connect(self) -> Salesforce:
        if self._http is None:
            self._http = http_session(self.ca_bundle, self.timeout_seconds, self.max_retries)
            self._http.hooks["response"].append(self._note_server_time)
        if self._can_login:
            try:
                session_id, instance = SalesforceLogin(
                    username=self.username, password=self.password, security_token=self.security_token or "",
                    sf_version=self.api_version, session=self._http, domain=self.domain,
                    scratch_url=self.login_url.rstrip("/") if self.login_url else None)
            except SalesforceAuthenticationFailed as exc:
                raise CrmError(f"Salesforce login failed for user {self.username} at {self._login_host()} "
                               f"({exc.code}): {CREDENTIALS_HINT}") from None
            except requests.RequestException as exc:
                raise self._transport_error(exc, self._login_host()) from None
            return Salesforce(session_id=session_id, instance_url=f"https://{instance}", session=self._http,
                              version=self.api_version)
        if self.session_id and self.instance_url:
            return Salesforce(session_id=self.session_id, instance_url=self.instance_url.rstrip("/"), session=self._http,
                              version=self.api_version)
        raise CrmError("Salesforce is not configured: set SALESFORCE_USERNAME, SALESFORCE_PASSWORD and "
                       "SALESFORCE_SECURITY_TOKEN, or SALESFORCE_INSTANCE_URL and SALESFORCE_SESSION_ID")

    @property
    def client(self) -> Salesforce:
        """The logged-in simple-salesforce client (built on first use)."""
        if self._client is None:
            self._client = self._connect()
        return self._client

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._http is not None:
            self._http.close()
        self._client = self._http = None

    def _note_server_time(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        """Salesforce's clock as of its latest answer (its Date header; None without one)."""
        try:
            self._server_time = parsedate_to_datetime(response.headers["Date"]).astimezone(UTC)
        except (KeyError, TypeError, ValueError):
            self._server_time = None

    def _call(self, action: Callable[[Salesforce], T], renew: bool = True) -> T:
        """Run one API call; an expired session is renewed by logging in again (once) when credentials are
        configured and `renew` allows re-running `action`; every failure becomes a one-line CrmError."""
        try:
            try:
                return action(self.client)
            except SalesforceExpiredSession:
                if not self._can_login:
                    raise CrmError(NOT_RENEWABLE) from None
                if not renew:
                    raise
                self._client = self._connect()
                return action(self._client)
        except SalesforceExpiredSession:
            raise CrmError("Salesforce session expired while the call could not be repeated (or again right after a "
                           "fresh login): run again") from None
        except SalesforceRefusedRequest as exc:
            raise self._refused(exc) from None
        except (SalesforceMalformedRequest, SalesforceMoreThanOneRecord) as exc:
            raise CrmError(f"Salesforce rejected the request: {_describe(exc)}") from None
        except SalesforceError as exc:
            raise CrmError(f"Salesforce answered HTTP {exc.status}: {_describe(exc)}") from None
        except requests.RequestException as exc:
            raise self._transport_error(exc, self._client.base_url if self._client else self._login_host()) from None

    def _refused(self, exc: SalesforceRefusedRequest) -> CrmError:
        code = _error_code(exc)
        if code == "REQUEST_LIMIT_EXCEEDED":
            usage = self._client.api_usage.get("api-usage") if self._client is not None else None
            figures = f" ({usage.used}/{usage.total} requests used)" if usage else ""
            return CrmError(f"the Salesforce org's daily API request limit is exhausted{figures}: retry after the limit "
                            "resets (rolling 24 h) or ask the Salesforce admin to raise it")
        return CrmError(f"Salesforce refused the request ({code or 'HTTP 403'}): give the user of SALESFORCE_USERNAME access "
                        "to Contacts")

    def _transport_error(self, exc: requests.RequestException, url: str) -> CrmError:
        host = url.split("/services/")[0]
        if isinstance(exc, requests.exceptions.SSLError):
            return CrmError(f"TLS verification of {host} failed: set SALESFORCE_CA_BUNDLE to the PEM file of the CA that "
                            "issued its certificate (or unset it to trust the system store)")
        if isinstance(exc, requests.Timeout):
            return CrmError(f"Salesforce at {host} did not answer within {self.timeout_seconds} s: retry later or raise the timeout")
        return CrmError(f"cannot reach Salesforce at {host} ({type(exc).__name__}): check SALESFORCE_INSTANCE_URL / "
                        "SALESFORCE_LOGIN_URL and the network")

    # --- reads ---------------------------------------------------------------------------------------

    @property
    def mapping(self) -> ContactMapping:
        """The field mapping, checked against the org's Contact describe once: a missing external-id field
        gives NULL external_id (the org lacks it); a missing custom field is a setting error. Names take the
        describe's spelling (API names are case-insensitive, record keys and CSV headers are not)."""
        if self._mapping is None:
            custom = parse_custom_fields(self.custom_fields)
            described = self._call(lambda sf: sf.Contact.describe())
            names = {field["name"].lower(): field["name"] for field in described["fields"]}
            missing = [name for name in custom.values() if name.lower() not in names]
            if missing:
                raise CrmError(f"SALESFORCE_CUSTOM_FIELDS names {missing[0]}, which Contact lacks: fix the field name")
            external = names.get(self.external_id_field.lower()) if self.external_id_field else None
            self._mapping = ContactMapping(external_id_field=external,
                                           custom_fields={column: names[name.lower()] for column, name in custom.items()})
        return self._mapping

    def count_contacts(self) -> int:
        return int(self._call(lambda sf: sf.query("SELECT COUNT() FROM Contact"))["totalSize"])

    def iter_contacts(self, batch_size: int = 10_000) -> Iterator[pa.RecordBatch]:
        """All contacts as canonical RecordBatches of at most `batch_size` rows (REST ordered by Id)."""
        for batch in self._contacts(None, batch_size):
            yield batch.select(CONTACT_SCHEMA.names)

    def contact_changes(self, since: datetime | None, batch_size: int = 10_000) -> ContactChanges:
        """The contacts whose SystemModstamp is at or after `since`, deleted ones included (queryAll: they carry
        is_deleted, until Salesforce purges its recycle bin), as CHANGES_SCHEMA batches; every live contact when
        `since` is None. Their `watermark` is where the next extract starts."""
        return ContactChanges(lambda changes: self._contacts(since, batch_size, changes))

    def _contacts(self, since: datetime | None, batch_size: int,
                  changes: ContactChanges | None = None) -> Iterator[pa.RecordBatch]:
        mapping = self.mapping
        fields = ", ".join([*mapping.soql_fields(), *CHANGE_FIELDS])
        where = "" if since is None else format_soql(" WHERE SystemModstamp >= {}", since.astimezone(UTC))
        deleted = since is not None
        self._server_time = None
        count = self._call(lambda sf: sf.query("SELECT COUNT() FROM Contact" + where, include_deleted=deleted))
        if changes is not None and self._server_time is not None:
            changes.began = self._server_time.replace(microsecond=0) - CLOCK_MARGIN
        if int(count["totalSize"]) > self.bulk_threshold:
            yield from self._bulk_contacts(f"SELECT {fields} FROM Contact{where}", mapping, batch_size, deleted)
            return
        soql = f"SELECT {fields} FROM Contact{where} ORDER BY Id"
        # query + query_more page by page (what query_all_iter does), so each page can renew the session
        result = self._call(lambda sf: sf.query(soql, include_deleted=deleted))
        rows: list[dict] = []
        while True:
            for record in result["records"]:
                rows.append({**mapping.from_record(record), "system_modstamp": parse_datetime(record.get("SystemModstamp")),
                             "is_deleted": bool(record.get("IsDeleted"))})
                if len(rows) >= batch_size:
                    yield pa.RecordBatch.from_pylist(rows, schema=CHANGES_SCHEMA)
                    rows = []
            if result["done"]:
                break
            next_url = result["nextRecordsUrl"]
            result = self._call(lambda sf: sf.query_more(next_url, identifier_is_url=True, include_deleted=deleted))
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=CHANGES_SCHEMA)

    def read_contacts(self, crm_ids: Sequence[str], chunk: int = 200) -> pa.Table:
        """The contacts with these Ids as Salesforce holds them now (CONTACT_SCHEMA; an unknown Id is absent),
        queried `chunk` Ids at a time: what write-back reads back after writing."""
        mapping = self.mapping
        fields = ", ".join(mapping.soql_fields())
        ids = list(dict.fromkeys(crm_ids))
        batches = []
        for start in range(0, len(ids), chunk):
            soql = format_soql("SELECT {:literal} FROM Contact WHERE Id IN {}", fields, ids[start:start + chunk])
            records = self._call(lambda sf: sf.query_all(soql))["records"]
            batches.append(to_batch(mapping.from_record(record) for record in records))
        return pa.Table.from_batches(batches, schema=CONTACT_SCHEMA)

    def _bulk_contacts(self, soql: str, mapping: ContactMapping, batch_size: int,
                       deleted: bool) -> Iterator[pa.RecordBatch]:
        """Bulk 2.0 query pages (CSV, `batch_size` records each; queryAll when `deleted`), parsed one at a time into
        CHANGES_SCHEMA batches, the next page downloaded while the caller writes this one (at most two pages held).
        A session that expires before the first page starts a fresh job after re-login; mid-export it cannot
        resume the job's pages."""
        def first_page(sf: Salesforce) -> tuple[Iterator[str], str | None]:
            run = sf.bulk2.Contact.query_all if deleted else sf.bulk2.Contact.query
            pages = run(soql, max_records=batch_size, wait=self.bulk_wait_seconds)
            return pages, next(pages, None)

        pages, page = self._call(first_page)
        with ThreadPoolExecutor(1, thread_name_prefix="bulk-page") as downloads:
            while page is not None:
                following = downloads.submit(self._call, lambda sf: next(pages, None), False)
                batch = _bulk_batch(page, mapping)
                if batch is not None:
                    yield batch
                page = following.result()

    # --- writes --------------------------------------------------------------------------------------

    def upsert_contacts(self, rows: Iterable[dict]) -> list[WriteResult]:
        """Create or update contacts by the external-id field (canonical rows carrying `external_id`).
        REST per record up to `bulk_threshold` rows, one Bulk 2.0 upsert job above it."""
        mapping = self.mapping
        if not mapping.external_id_field:
            raise CrmError(f"Contact has no external-id field {self.external_id_field}: set SALESFORCE_EXTERNAL_ID_FIELD "
                           "to the org's KOL id field")
        field = mapping.external_id_field
        items = []
        for row in rows:
            if not row.get("external_id"):
                raise CrmError("a row to upsert has no external_id: upsert needs the KOL id of every row")
            items.append((str(row["external_id"]), mapping.to_salesforce(row)))
        if len(items) > self.bulk_threshold:
            records = [{**data, field: key} for key, data in items]
            return self._bulk_write("upsert", records, [key for key, _ in items], field)
        results = []
        for key, data in items:
            response, problem = self._call(lambda sf: _record_call(
                lambda: sf.Contact.upsert(f"{field}/{quote(key, safe='')}", data, raw_response=True)))
            if problem is not None:
                results.append(WriteResult(key, None, False, False, problem))
                continue
            created = response.status_code == 201
            crm_id = response.json().get("id") if response.content else None
            results.append(WriteResult(key, crm_id, created, True))
        return self._fill_ids(results, field)

    def _fill_ids(self, results: list[WriteResult], field: str) -> list[WriteResult]:
        """Contact Ids of updated rows (a 204 upsert answers no body), looked up 200 keys a query."""
        missing = [result.key for result in results if result.success and result.crm_id is None]
        ids: dict[str, str] = {}
        for start in range(0, len(missing), 200):
            chunk = missing[start:start + 200]
            soql = format_soql("SELECT Id, {:literal} FROM Contact WHERE {:literal} IN {}", field, field, chunk)
            for record in self._call(lambda sf: sf.query_all(soql))["records"]:
                ids[str(record[field]).lower()] = record["Id"]
        return [WriteResult(r.key, r.crm_id or ids.get(r.key.lower()), r.created, r.success, r.error) for r in results]

    def update_contacts(self, rows: Iterable[dict]) -> list[WriteResult]:
        """Update contacts by Id (canonical rows carrying `crm_id`; `external_id` too is written, linking a contact
        to its KOL id); REST up to `bulk_threshold`, Bulk 2.0 above."""
        mapping = self.mapping
        items = []
        for row in rows:
            if not row.get("crm_id"):
                raise CrmError("a row to update has no crm_id: update needs the Salesforce Contact Id of every row")
            items.append((str(row["crm_id"]), mapping.to_salesforce(row, with_external_id=True)))
        if len(items) > self.bulk_threshold:
            return self._bulk_write("update", [{**data, "Id": key} for key, data in items], [key for key, _ in items], "Id")
        results = []
        for key, data in items:
            _, problem = self._call(lambda sf: _record_call(lambda: sf.Contact.update(key, data)))
            results.append(WriteResult(key, key, False, problem is None, problem))
        return results

    def _bulk_write(self, operation: str, records: list[dict], keys: list[str], key_field: str) -> list[WriteResult]:
        """One Bulk 2.0 ingest job; per-record results from its successful/failed CSVs, in input order."""
        def run(sf: Salesforce) -> list[dict]:
            handler = sf.bulk2.Contact
            if operation == "upsert":
                return handler.upsert(records=records, external_id_field=key_field, wait=self.bulk_wait_seconds)
            return handler.update(records=records, wait=self.bulk_wait_seconds)

        by_key: dict[str, WriteResult] = {}
        for job in self._call(run):
            job_id = job["job_id"]
            for row in csv.DictReader(io.StringIO(self._call(lambda sf: sf.bulk2.Contact.get_successful_records(job_id)))):
                key = row[key_field]
                by_key[key.lower()] = WriteResult(key, row["sf__Id"], row["sf__Created"] == "true", True)
            for row in csv.DictReader(io.StringIO(self._call(lambda sf: sf.bulk2.Contact.get_failed_records(job_id)))):
                key = row[key_field]
                by_key[key.lower()] = WriteResult(key, row["sf__Id"] or None, False, False, row["sf__Error"])
        return [by_key.get(key.lower(), WriteResult(key, None, False, False, "not processed by the Bulk 2.0 job"))
                for key in keys]


def _bulk_batch(page: str, mapping: ContactMapping) -> pa.RecordBatch | None:
    """A Bulk 2.0 CSV page as a CHANGES_SCHEMA batch (None when it holds no rows), parsed by Arrow column by
    column: a page of 10,000 rows in milliseconds."""
    if not page.strip():
        return None
    as_text = pa_csv.ConvertOptions(column_types=dict.fromkeys([*mapping.soql_fields(), *CHANGE_FIELDS], pa.string()),
                                    strings_can_be_null=False)
    table = pa_csv.read_csv(io.BytesIO(page.encode("utf-8")), read_options=pa_csv.ReadOptions(use_threads=False),
                            parse_options=pa_csv.ParseOptions(newlines_in_values=True), convert_options=as_text)
    if not table.num_rows:
        return None
    batch = mapping.from_columns(table)
    modstamps = table.column("SystemModstamp").combine_chunks()
    stamps = timestamps(pc.if_else(pc.equal(modstamps, ""), pa.scalar(None, pa.string()), modstamps))
    deleted_flags = pc.equal(pc.utf8_lower(table.column("IsDeleted").combine_chunks()), "true")
    return pa.RecordBatch.from_arrays([*batch.columns, stamps, deleted_flags], schema=CHANGES_SCHEMA)


def _record_call(call: Callable[[], T]) -> tuple[T | None, str | None]:
    """(result, None), or (None, "errorCode: message") when Salesforce refuses this record (400, 300, 404):
    a record's own problem goes to its WriteResult instead of stopping the batch."""
    try:
        return call(), None
    except (SalesforceMalformedRequest, SalesforceMoreThanOneRecord, SalesforceResourceNotFound) as exc:
        return None, _describe(exc)


def _error_code(exc: SalesforceError) -> str | None:
    content = exc.content
    if isinstance(content, list) and content and isinstance(content[0], dict):
        return content[0].get("errorCode")
    return None


def _describe(exc: SalesforceError) -> str:
    """errorCode: message of a Salesforce error body, on one line."""
    content = exc.content
    if isinstance(content, list) and content and isinstance(content[0], dict):
        return f"{content[0].get('errorCode')}: {content[0].get('message')}".replace("\n", " ")
    return str(content)[:200].replace("\n", " ")
