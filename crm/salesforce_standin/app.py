"""The stand-in's HTTP surface: exactly the Salesforce calls simple-salesforce 1.12.10 makes for Contacts.

SOAP login, the REST query / queryAll / query-more, sobject describe / get / create / update /
upsert, and Bulk 2.0 query and ingest jobs. Every /services/data call after the version list
needs a live session (401 INVALID_SESSION_ID otherwise), counts against the org's request
budget (403 REQUEST_LIMIT_EXCEEDED past it) and carries `Sforce-Limit-Info: api-usage=N/M`. Every answer's
Date header is the org's clock (the store's), which stamps its saves.
"""

from __future__ import annotations

import base64
import csv
import io
import itertools
import json
import secrets
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime as http_date

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from crm.salesforce_standin.soql import SoqlError, parse
from crm.salesforce_standin.store import ContactStore, StoreError, format_datetime, salesforce_id

ORG_ID = "00D5g000004StNdEAK"
USER_ID = "0055g00000StNdUAAV"
QUERY_BATCH = 2_000
OPEN_CURSORS = 50  # Salesforce closes a user's oldest query cursors too; abandoned ones must not pile up
SOAP_NS = "http://schemas.xmlsoap.org/soap/envelope/"
DELIMITERS = {"COMMA": ",", "TAB": "\t", "PIPE": "|", "SEMICOLON": ";", "CARET": "^", "BACKQUOTE": "`"}


@dataclass
class OrgConfig:
    username: str
    password: str
    security_token: str
    session_ttl_seconds: float
    request_limit: int


@dataclass
class Job:
    id: str
    operation: str
    object: str
    state: str
    created: datetime
    fields: list[str] = field(default_factory=list)  # query jobs: selected fields
    records: list[dict] = field(default_factory=list)  # query jobs: the result snapshot
    external_id_field: str | None = None
    column_delimiter: str = "COMMA"
    line_ending: str = "LF"
    uploads: list[str] = field(default_factory=list)  # ingest jobs: CSV bodies
    successes: list[tuple[str, bool, dict]] = field(default_factory=list)
    failures: list[tuple[str, str, dict]] = field(default_factory=list)
    header: list[str] = field(default_factory=list)


class Org:
    """Sessions, request budget, query cursors and Bulk jobs around one ContactStore."""

    def __init__(self, config: OrgConfig, store: ContactStore):
        self.config = config
        self.store = store
        self.lock = threading.Lock()
        self.sessions: dict[str, float] = {}  # session id -> expiry (time.monotonic)
        self.request_count = 0
        self.cursors: dict[str, tuple[list[str], list[dict]]] = {}
        self.jobs: dict[str, Job] = {}
        self._job_numbers = itertools.count(1)
        self.faults: list[tuple[int, int | None]] = []  # (status, Retry-After seconds) for the next API calls

    def take_fault(self) -> tuple[int, int | None] | None:
        with self.lock:
            return self.faults.pop(0) if self.faults else None

    def login(self, username: str, password_and_token: str) -> str | None:
        expected = self.config.password + self.config.security_token
        if not (secrets.compare_digest(username, self.config.username)
                and secrets.compare_digest(password_and_token.encode(), expected.encode())):
            return None
        session_id = f"{ORG_ID}!{secrets.token_urlsafe(48)}"
        with self.lock:
            self.sessions[session_id] = time.monotonic() + self.config.session_ttl_seconds
        return session_id

    def session_valid(self, session_id: str) -> bool:
        with self.lock:
            expiry = self.sessions.get(session_id)
            return expiry is not None and expiry > time.monotonic()

    def expire_sessions(self) -> None:
        with self.lock:
            self.sessions.clear()

    def count_request(self) -> tuple[bool, str]:
        """(within budget, Sforce-Limit-Info value) after counting one API request."""
        with self.lock:
            self.request_count += 1
            used = min(self.request_count, self.config.request_limit)
            return self.request_count <= self.config.request_limit, f"api-usage={used}/{self.config.request_limit}"

    def new_job_id(self, prefix: str) -> str:
        return salesforce_id(prefix, next(self._job_numbers))



def advance(job: Job) -> None:
    """One status poll moves a job one step, like a job the platform picks up and then finishes."""
    job.state = {"UploadComplete": "InProgress", "InProgress": "JobComplete"}.get(job.state, job.state)

def error(status: int, code: str, message: str, fields: list[str] | None = None) -> JSONResponse:
    body: dict = {"message": message, "errorCode": code}
    if fields:
        body["fields"] = fields
    return JSONResponse([body], status_code=status)


class Refused(Exception):
    """Ends a request with `response` (the app answers it as it is)."""

    def __init__(self, response: Response):
        super().__init__(response.status_code)
        self.response = response


def not_found() -> JSONResponse:
    return error(404, "NOT_FOUND", "The requested resource does not exist")


def soap_fault(code: str, message: str) -> Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" '
        'xmlns:sf="urn:fault.partner.soap.sforce.com" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
        f"<soapenv:Body><soapenv:Fault><faultcode>sf:{code}</faultcode><faultstring>{code}: {message}</faultstring>"
        f'<detail><sf:LoginFault xsi:type="sf:LoginFault"><sf:exceptionCode>{code}</sf:exceptionCode>'
        f"<sf:exceptionMessage>{message}</sf:exceptionMessage></sf:LoginFault></detail></soapenv:Fault></soapenv:Body>"
        "</soapenv:Envelope>"
    )
    return Response(body, status_code=500, media_type="text/xml")


def rest_value(value: object) -> object:
    return format_datetime(value) if isinstance(value, datetime) else value


def bulk_csv(store: ContactStore, fields: list[str], records: list[dict], delimiter: str, eol: str) -> bytes:
    """A Bulk 2.0 result page as Salesforce spells it: every value quoted, ISO date-times with milliseconds and Z,
    true/false, empty for null. Built column by column with Arrow, so that a 1M-contact export measures its client
    rather than this server's CSV writing."""
    columns = [csv_column(store.field_spec(name).type, list(map(store.getter(name), records))) for name in fields]
    out = io.BytesIO()
    pa_csv.write_csv(pa.Table.from_arrays(columns, names=fields), out,
                     pa_csv.WriteOptions(quoting_style="all_valid", delimiter=delimiter, eol=eol))
    return out.getvalue()


def csv_column(field_type: str, values: list) -> pa.Array:
    if field_type == "datetime":
        stamps = pc.cast(pa.array(values, pa.timestamp("us", tz="UTC")), pa.timestamp("ms", tz="UTC"), safe=False)
        distinct = stamps.dictionary_encode()  # saves share their second: each spelled once
        text = pc.take(pc.strftime(distinct.dictionary, format="%Y-%m-%dT%H:%M:%SZ"), distinct.indices)  # %S: 05.123
    elif field_type == "boolean":
        text = pc.if_else(pa.array(values, pa.bool_()), "true", "false")
    else:
        text = pa.array([value if value is None or isinstance(value, str) else str(value) for value in values],
                        pa.string())
    return pc.fill_null(text, "")


def create_app(org: Org, base_url_holder: list[str]) -> FastAPI:
    """The app; `base_url_holder[0]` is the server's https://127.0.0.1:PORT once the socket is bound."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    store = org.store

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        return exc.response

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        return error(exc.status, exc.code, exc.message, exc.fields)

    def record_json(record: dict, fields: list[str], version: str) -> dict:
        out: dict = {"attributes": {"type": "Contact", "url": f"/services/data/v{version}/sobjects/Contact/{record['Id']}"}}
        for name in fields:
            if name.startswith("Account."):
                account = store.accounts.get(record.get("AccountId") or "")
                if account is None:
                    out["Account"] = None
                    continue
                nested = out.get("Account") or {
                    "attributes": {"type": "Account", "url": f"/services/data/v{version}/sobjects/Account/{account['Id']}"}}
                nested[name.partition(".")[2]] = account[name.partition(".")[2]]
                out["Account"] = nested
            else:
                out[name] = rest_value(record.get(name))
        return out

    def query_page(version: str, locator: str, offset: int) -> JSONResponse:
        cursor = org.cursors.get(locator)
        if cursor is None:
            return error(400, "INVALID_QUERY_LOCATOR", "invalid query locator")
        fields, records = cursor
        page = records[offset:offset + QUERY_BATCH]
        done = offset + QUERY_BATCH >= len(records)
        body: dict = {"totalSize": len(records), "done": done,
                      "records": [record_json(record, fields, version) for record in page]}
        if done:
            org.cursors.pop(locator, None)
        else:
            body["nextRecordsUrl"] = f"/services/data/v{version}/query/{locator}-{offset + QUERY_BATCH}"
        return JSONResponse(body)

    @app.middleware("http")
    async def sessions_and_limits(request: Request, call_next):
        path = request.url.path
        if not path.startswith("/services/data/v"):
            return await call_next(request)
        fault = org.take_fault()
        if fault is not None:  # an overloaded pod or gateway: before auth and budget, as a proxy would answer
            status, retry_after = fault
            headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
            return Response("<html><body>Service Unavailable</body></html>", status_code=status, media_type="text/html",
                            headers=headers)
        authorization = request.headers.get("authorization", "")
        if not (authorization.startswith("Bearer ") and org.session_valid(authorization.removeprefix("Bearer "))):
            return error(401, "INVALID_SESSION_ID", "Session expired or invalid")
        within, usage = org.count_request()
        if not within:
            response = error(403, "REQUEST_LIMIT_EXCEEDED", "TotalRequests Limit exceeded.")
        else:
            response = await call_next(request)
        response.headers["Sforce-Limit-Info"] = usage
        return response

    @app.middleware("http")  # outermost: every answer, refusals too
    async def server_date(request: Request, call_next):
        response = await call_next(request)
        response.headers["Date"] = http_date(store.now(), usegmt=True)
        return response

    # --- login ---------------------------------------------------------------------------------------

    @app.post("/services/Soap/u/{version}")
    async def soap_login(version: str, request: Request) -> Response:
        try:
            root = ET.fromstring(await request.body())
        except ET.ParseError:
            return soap_fault("INVALID_LOGIN", "Invalid username, password, security token; or user locked out.")
        found = {element.tag.rpartition("}")[2]: (element.text or "") for element in root.iter()}
        session_id = org.login(found.get("username", ""), found.get("password", ""))
        if session_id is None:
            return soap_fault("INVALID_LOGIN", "Invalid username, password, security token; or user locked out.")
        base = base_url_holder[0]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" '
            'xmlns="urn:partner.soap.sforce.com" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>'
            f"<loginResponse><result><metadataServerUrl>{base}/services/Soap/m/{version}/{ORG_ID}</metadataServerUrl>"
            f"<passwordExpired>false</passwordExpired><sandbox>false</sandbox>"
            f"<serverUrl>{base}/services/Soap/u/{version}/{ORG_ID}</serverUrl><sessionId>{session_id}</sessionId>"
            f"<userId>{USER_ID}</userId><userInfo><organizationId>{ORG_ID}</organizationId>"
            f"<sessionSecondsValid>{int(org.config.session_ttl_seconds)}</sessionSecondsValid>"
            f"<userName>{org.config.username}</userName></userInfo></result></loginResponse></soapenv:Body></soapenv:Envelope>"
        )
        return Response(body, media_type="text/xml")

    # --- discovery -----------------------------------------------------------------------------------

    @app.get("/services/data")
    @app.get("/services/data/")
    async def versions() -> list[dict]:
        return [{"label": "Winter '24", "url": "/services/data/v59.0", "version": "59.0"},
                {"label": "Spring '24", "url": "/services/data/v60.0", "version": "60.0"}]

    @app.get("/services/data/v{version}")
    @app.get("/services/data/v{version}/")
    async def resources(version: str) -> dict:
        prefix = f"/services/data/v{version}"
        return {name: f"{prefix}/{name}" for name in ("sobjects", "query", "queryAll", "limits", "jobs")}

    @app.get("/services/data/v{version}/limits")
    @app.get("/services/data/v{version}/limits/")
    async def limits(version: str) -> dict:
        limit = org.config.request_limit
        return {"DailyApiRequests": {"Max": limit, "Remaining": max(0, limit - org.request_count)}}

    @app.get("/services/data/v{version}/sobjects/Contact/describe")
    @app.get("/services/data/v{version}/sobjects/Contact/describe/")
    async def describe(version: str) -> dict:
        fields = []
        for spec in store.fields.values():
            fields.append({
                "name": spec.name, "type": spec.type, "label": spec.label, "length": spec.length if spec.type != "datetime" else 0,
                "externalId": spec.external_id, "unique": spec.unique, "updateable": spec.updateable,
                "createable": spec.createable, "nillable": spec.nillable, "custom": spec.name.endswith("__c"),
                "idLookup": spec.name == "Id" or spec.external_id or spec.type == "email",
                "relationshipName": spec.relationship_name, "referenceTo": ["Account"] if spec.relationship_name else [],
            })
        return {"name": "Contact", "label": "Contact", "keyPrefix": "003", "queryable": True, "createable": True,
                "updateable": True, "fields": fields,
                "urls": {"sobject": f"/services/data/v{version}/sobjects/Contact",
                         "describe": f"/services/data/v{version}/sobjects/Contact/describe"}}

    # --- queries -------------------------------------------------------------------------------------

    def run_query(version: str, q: str, include_deleted: bool) -> JSONResponse:
        try:
            query = parse(q)
            fields, records = store.run(query, include_deleted=include_deleted)
        except SoqlError as exc:
            return error(400, exc.code, str(exc))
        if query.count:
            return JSONResponse({"totalSize": len(records), "done": True, "records": []})
        locator = "01g" + secrets.token_hex(8)
        org.cursors[locator] = (fields, records)
        while len(org.cursors) > OPEN_CURSORS:
            org.cursors.pop(next(iter(org.cursors)))
        return query_page(version, locator, 0)

    @app.get("/services/data/v{version}/query")
    @app.get("/services/data/v{version}/query/")
    async def query(version: str, q: str = "") -> JSONResponse:
        return run_query(version, q, include_deleted=False)

    @app.get("/services/data/v{version}/queryAll")
    @app.get("/services/data/v{version}/queryAll/")
    async def query_all(version: str, q: str = "") -> JSONResponse:
        return run_query(version, q, include_deleted=True)

    @app.get("/services/data/v{version}/query/{locator}-{offset}")
    @app.get("/services/data/v{version}/queryAll/{locator}-{offset}")
    async def query_more(version: str, locator: str, offset: int) -> JSONResponse:
        return query_page(version, locator, offset)

    # --- records -------------------------------------------------------------------------------------

    async def json_body(request: Request) -> dict:
        try:
            data = json.loads(await request.body() or b"{}")
        except json.JSONDecodeError as exc:
            raise Refused(error(400, "JSON_PARSER_ERROR", f"Unexpected character: {exc.msg}")) from None
        if not isinstance(data, dict):
            raise Refused(error(400, "JSON_PARSER_ERROR", "Cannot deserialize instance of Contact from a non-object"))
        return data

    @app.post("/services/data/v{version}/sobjects/Contact")
    @app.post("/services/data/v{version}/sobjects/Contact/")
    async def create(version: str, request: Request) -> JSONResponse:
        data = await json_body(request)
        contact_id = store.create(data)
        return JSONResponse({"id": contact_id, "success": True, "errors": []}, status_code=201)

    @app.get("/services/data/v{version}/sobjects/Contact/{contact_id}")
    async def get(version: str, contact_id: str) -> JSONResponse:
        record = store.contacts.get(contact_id)
        if record is None:
            return not_found()
        return JSONResponse(record_json(record, list(store.fields), version))

    @app.patch("/services/data/v{version}/sobjects/Contact/{contact_id}")
    async def update(version: str, contact_id: str, request: Request) -> Response:
        data = await json_body(request)
        store.update(contact_id, data)
        return Response(status_code=204)

    @app.patch("/services/data/v{version}/sobjects/Contact/{field_name}/{key}")
    async def upsert(version: str, field_name: str, key: str, request: Request) -> Response:
        data = await json_body(request)
        try:
            contact_id, created = store.upsert(field_name, key, data)
        except SoqlError:
            return error(404, "NOT_FOUND", f"Provided external ID field does not exist or is not accessible: {field_name}")
        if created:
            return JSONResponse({"id": contact_id, "success": True, "errors": [], "created": True}, status_code=201)
        return Response(status_code=204)

    # --- Bulk 2.0 ------------------------------------------------------------------------------------

    def existing_job(job_id: str) -> Job:
        job = org.jobs.get(job_id)
        if job is None:
            raise Refused(not_found())
        return job

    def job_status(version: str, job_id: str, is_query: bool) -> JSONResponse:
        job = existing_job(job_id)
        advance(job)
        return JSONResponse(job_json(job, version, is_query))

    def job_json(job: Job, version: str, is_query: bool) -> dict:
        body = {
            "id": job.id, "operation": job.operation, "object": job.object, "createdById": USER_ID,
            "createdDate": format_datetime(job.created), "systemModstamp": format_datetime(job.created),
            "state": job.state, "concurrencyMode": "Parallel", "contentType": "CSV", "apiVersion": float(version),
            "lineEnding": job.line_ending, "columnDelimiter": job.column_delimiter,
        }
        if is_query:
            body["numberRecordsProcessed"] = len(job.records) if job.state == "JobComplete" else 0
        else:
            body["externalIdFieldName"] = job.external_id_field
            body["numberRecordsProcessed"] = len(job.successes) + len(job.failures)
            body["numberRecordsFailed"] = len(job.failures)
        body["retries"] = 0
        body["totalProcessingTime"] = 0
        return body

    @app.post("/services/data/v{version}/jobs/query")
    async def create_query_job(version: str, request: Request) -> JSONResponse:
        data = await json_body(request)
        operation = data.get("operation")
        if operation not in ("query", "queryAll"):
            return error(400, "INVALIDJOB", f"InvalidJob : Invalid operation: {operation}")
        try:
            query = parse(data.get("query") or "")
            if query.count:
                raise SoqlError("COUNT() is not supported by Bulk API 2.0 query jobs", "INVALIDJOB")
            fields, records = store.run(query, include_deleted=operation == "queryAll")
        except SoqlError as exc:
            return error(400, exc.code, str(exc))
        job = Job(org.new_job_id("750"), operation, query.object_name, "UploadComplete", store.now(),
                  fields=fields, records=records, column_delimiter=data.get("columnDelimiter") or "COMMA",
                  line_ending=data.get("lineEnding") or "LF")
        org.jobs[job.id] = job
        return JSONResponse(job_json(job, version, True))

    @app.get("/services/data/v{version}/jobs/query/{job_id}")
    async def get_query_job(version: str, job_id: str) -> JSONResponse:
        return job_status(version, job_id, is_query=True)

    @app.get("/services/data/v{version}/jobs/query/{job_id}/results")
    async def query_job_results(version: str, job_id: str, maxRecords: int | None = None, locator: str | None = None) -> Response:
        job = existing_job(job_id)
        if job.state != "JobComplete":
            return error(400, "JOB_NOT_COMPLETE", f"Job {job_id} is not complete: {job.state}")
        try:
            offset = int(base64.b64decode(locator).decode()) if locator else 0
        except ValueError:
            return error(400, "INVALID_LOCATOR", f"invalid locator {locator!r}")
        size = maxRecords if maxRecords and maxRecords > 0 else len(job.records)
        page = job.records[offset:offset + size]
        body = bulk_csv(store, job.fields, page, DELIMITERS.get(job.column_delimiter, ","),
                        "\r\n" if job.line_ending == "CRLF" else "\n")
        following = offset + len(page)
        next_locator = base64.b64encode(str(following).encode()).decode() if following < len(job.records) else "null"
        return Response(body, media_type="text/csv",
                        headers={"Sforce-Locator": next_locator, "Sforce-NumberOfRecords": str(len(page))})

    @app.post("/services/data/v{version}/jobs/ingest")
    async def create_ingest_job(version: str, request: Request) -> JSONResponse:
        data = await json_body(request)
        operation = data.get("operation")
        if operation not in ("insert", "update", "upsert"):
            return error(400, "INVALIDJOB", f"InvalidJob : Invalid operation: {operation}")
        if data.get("object") != "Contact":
            return error(400, "INVALIDJOB", f"InvalidJob : Unable to find object: {data.get('object')}")
        external = data.get("externalIdFieldName")
        if operation == "upsert":
            try:
                external = store.canonical_field(external or "")
            except SoqlError:
                return error(400, "INVALIDJOB", f"InvalidJob : Field name provided, {external} does not match an External ID, "
                             "Salesforce Id, or indexed field for Contact")
        job = Job(org.new_job_id("750"), operation, "Contact", "Open", store.now(),
                  external_id_field=external, column_delimiter=data.get("columnDelimiter") or "COMMA",
                  line_ending=data.get("lineEnding") or "LF")
        org.jobs[job.id] = job
        return JSONResponse(job_json(job, version, False))

    @app.put("/services/data/v{version}/jobs/ingest/{job_id}/batches")
    @app.put("/services/data/v{version}/jobs/ingest/{job_id}/batches/")
    async def upload(version: str, job_id: str, request: Request) -> Response:
        job = existing_job(job_id)
        if job.state != "Open":
            return error(400, "INVALIDJOB", f"InvalidJob : Job {job_id} is not open for uploads: {job.state}")
        job.uploads.append((await request.body()).decode("utf-8-sig"))
        return Response(status_code=201)

    def process(job: Job) -> None:
        """Apply an ingest job's rows in order; '' leaves a field as it is, #N/A clears it (Bulk 2.0 rules)."""
        delimiter = DELIMITERS.get(job.column_delimiter, ",")
        for upload in job.uploads:
            reader = csv.DictReader(io.StringIO(upload), delimiter=delimiter)
            job.header = job.header or list(reader.fieldnames or [])
            for row in reader:
                values = {key: (None if value == "#N/A" else value) for key, value in row.items()
                          if key is not None and value != ""}
                try:
                    if job.operation == "insert":
                        job.successes.append((store.create(values), True, row))
                    elif job.operation == "update":
                        contact_id = values.pop("Id", None)
                        if not contact_id:
                            raise StoreError("MISSING_ARGUMENT", "Id not specified in an update call", ["Id"])
                        store.update(contact_id, values)
                        job.successes.append((contact_id, False, row))
                    else:
                        key = values.pop(job.external_id_field, None)
                        if not key:
                            raise StoreError("MISSING_ARGUMENT", f"{job.external_id_field} not specified", [job.external_id_field])
                        contact_id, created = store.upsert(job.external_id_field, key, values)
                        job.successes.append((contact_id, created, row))
                except StoreError as exc:
                    job.failures.append(("", f"{exc.code}:{exc.message}:{','.join(exc.fields)} --", row))

    @app.patch("/services/data/v{version}/jobs/ingest/{job_id}")
    async def set_ingest_state(version: str, job_id: str, request: Request) -> JSONResponse:
        job = existing_job(job_id)
        data = await json_body(request)
        state = data.get("state")
        if state == "UploadComplete" and job.state == "Open":
            job.state = "UploadComplete"
            process(job)
        elif state == "Aborted" and job.state in ("Open", "UploadComplete", "InProgress"):
            job.state = "Aborted"
        else:
            return error(400, "INVALIDJOB", f"InvalidJob : cannot change state from {job.state} to {state}")
        return JSONResponse(job_json(job, version, False))

    @app.get("/services/data/v{version}/jobs/ingest/{job_id}")
    async def get_ingest_job(version: str, job_id: str) -> JSONResponse:
        return job_status(version, job_id, is_query=False)

    def results_csv(first: list[str], rows: list[tuple], header: list[str]) -> Response:
        buffer = io.StringIO()
        writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerow(first + header)
        for row in rows:
            writer.writerow([row[0], str(row[1]).lower() if isinstance(row[1], bool) else row[1]]
                            + [row[2].get(name) or "" for name in header])
        return Response(buffer.getvalue(), media_type="text/csv")

    @app.get("/services/data/v{version}/jobs/ingest/{job_id}/{kind}")
    @app.get("/services/data/v{version}/jobs/ingest/{job_id}/{kind}/")
    async def ingest_results(version: str, job_id: str, kind: str) -> Response:
        job = existing_job(job_id)
        if kind == "successfulResults":
            return results_csv(["sf__Id", "sf__Created"], job.successes, job.header)
        if kind == "failedResults":
            return results_csv(["sf__Id", "sf__Error"], job.failures, job.header)
        if kind == "unprocessedRecords":  # every uploaded row is processed at UploadComplete
            return results_csv([], [], job.header)
        return not_found()
    return app
