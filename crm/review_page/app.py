"""The review page's ASGI app (Starlette, Jinja2 with autoescape): CRM admins decide and act on an
organization's latest reconciliation.

GET pages read the published copy (data.py) a page at a time; POSTs act through crm/actions.py and
crm/approvals.py, the same audited functions as `commops reconcile ...`, with the session's user as the
actor. Every POST is checked for the session's CSRF token before anything else; every answer carries
the security headers of access.py. The CRM resource (and its secrets) stays in this process: the page
shows only what the CRM returned for the records.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from crm import actions, approvals, listing
from crm.report import reports_dir
from crm.review_page import data
from crm.review_page.access import COOKIE, Access, Guard, Session, same
from crm.tables import STATUSES
from resources.warehouse import WarehouseResource

HERE = Path(__file__).parent
PAGE_SIZES = (25, 50, 100, 200)
ORG_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")  # the names `commops orgs` gives (a path part of the reports)
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
DOWNLOAD_BLOCK = 1024 * 1024
PLAN_ACTIONS = ("update", "create")
# The report files an admin downloads here (to merge in Salesforce, or to fill in decisions in Excel).
DOWNLOADS = {"reconciliation.csv": "latest.csv", "plan.csv": "latest-plan.csv", "merge.csv": "latest-merge.csv"}
AUDIT_ACTIONS = ("update", "create", "confirm", "reject", "undo", "approve", "exclude", "choose_master")


@dataclass
class PageConfig:
    data_dir: Path
    access: Access
    hosts: set[str]
    crm: Any  # the CRM resource, or None where none is configured (then `crm_problem` says what to set)
    crm_problem: str | None = None


Handler = Callable[[Request, Session], Awaitable[Response]]


def create_app(config: PageConfig) -> Starlette:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["parsed"] = data.parsed
    env.globals.update(statuses=STATUSES, page_sizes=PAGE_SIZES)
    warehouse = WarehouseResource(data_dir=str(config.data_dir))
    access = config.access

    def render(request: Request, template: str, session: Session | None, status: int = 200, **values: Any) -> Response:
        body = env.get_template(template).render(
            request=request, session=session, flashes=session.take_flashes() if session else [],
            signs_in=access.signs_in, crm_problem=config.crm_problem, **values)
        return HTMLResponse(body, status_code=status)

    def set_cookie(request: Request, response: Response, session: Session) -> Response:
        # Secure over HTTPS: behind a proxy named in COMMOPS_REVIEW_FORWARDED_ALLOW_IPS, as its X-Forwarded-Proto says
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", path="/",
                            secure=request.url.scheme == "https", max_age=int(access.sessions.lifetime))
        return response

    def refused(request: Request, session: Session | None, message: str, status: int) -> Response:
        return render(request, "message.html.j2", session, status=status, title="Refused", message=message)

    def signed_in(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """The handler for a signed-in session; a POST only with the session's CSRF token."""

        async def endpoint(request: Request) -> Response:
            session = access.sessions.get(request.cookies.get(COOKIE))
            if session is None or session.user is None:
                if request.method != "GET":
                    return refused(request, None, "Forged or expired form: no session (open the page again).", 403)
                if access.signs_in:
                    return RedirectResponse("/login", status_code=303)
                return render(request, "message.html.j2", None, status=401, title="Open the page with its token",
                              message="Open the URL `commops review` printed when it started (it carries this "
                                      "launch's token).")
            if request.method == "POST":
                origin = request.headers.get("origin")
                if origin is not None and not origin_ok(request, origin):
                    return refused(request, session, "Forged form: it came from another site.", 403)
                length = int(request.headers.get("content-length") or 0)
                if length > MAX_UPLOAD_BYTES:
                    return refused(request, session, f"The upload is larger than {MAX_UPLOAD_BYTES // 2**20} MiB.", 413)
                form = await request.form(max_part_size=MAX_UPLOAD_BYTES)
                request.state.form = form
                if not same(_text(form, "csrf"), session.csrf):
                    return refused(request, session, "Forged or expired form: its CSRF token is missing or wrong "
                                   "(open the page again). Nothing was changed.", 403)
            return await handler(request, session)

        return endpoint

    def origin_ok(request: Request, origin: str) -> bool:
        return origin == f"{request.url.scheme}://{request.headers.get('host', '')}"

    def org_of(request: Request, conn) -> data.OrgRun | None:
        return data.latest_run(conn, request.path_params["org"])

    def reading(handler: Callable[..., Response]) -> Handler:
        """A GET over the published copy, for an organization with a reconciliation."""

        async def endpoint(request: Request, session: Session) -> Response:
            def read() -> Response:
                try:
                    with data.published(warehouse.analytics_path) as conn:
                        org = org_of(request, conn)
                        if org is None:
                            return refused(request, session, f"No reconciliation of organization "
                                           f"{request.path_params['org']!r}.", 404)
                        return handler(request, session, conn, org)
                except data.NothingYet as error:
                    return render(request, "message.html.j2", session, title="Nothing to review yet", message=str(error))

            return await run_in_threadpool(read)

        return endpoint

    # ------------------------------------------------------------------ sign-in

    async def login(request: Request) -> Response:
        if not access.signs_in:
            session = access.by_token(request.query_params.get("token"))
            if session is None:
                return render(request, "message.html.j2", None, status=401, title="Wrong or missing token",
                              message="Open the URL `commops review` printed when it started (with this launch's token).")
            return set_cookie(request, RedirectResponse("/", status_code=303), session)
        session = access.sessions.get(request.cookies.get(COOKIE))
        if request.method == "GET":
            session = session or access.sessions.open(None)
            return set_cookie(request, render(request, "login.html.j2", session), session)
        form = await request.form()
        if session is None or not same(_text(form, "csrf"), session.csrf):
            return refused(request, None, "Forged or expired form: open the sign-in page again.", 403)
        name, address = _text(form, "user") or "", request.client.host if request.client else ""
        if wait := access.throttle.wait(address, name):
            minutes = math.ceil(wait / 60)
            session.flash("refused", f"Too many failed sign-ins: try again in {minutes} minute{'s' * (minutes > 1)}.")
            response = render(request, "login.html.j2", session, status=429)
            response.headers["Retry-After"] = str(math.ceil(wait))
            return response
        user = access.by_password(name, _text(form, "password") or "")
        if user is None:
            access.throttle.failed(address, name)
            session.flash("refused", "Wrong name or password.")
            return render(request, "login.html.j2", session, status=401)
        access.throttle.succeeded(address, name)
        access.sessions.close(session.id)  # a new id on sign-in: a planted session id is worth nothing
        return set_cookie(request, RedirectResponse("/", status_code=303), user)

    async def logout(request: Request, session: Session) -> Response:
        access.sessions.close(session.id)
        response = RedirectResponse("/login" if access.signs_in else "/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    # ------------------------------------------------------------------ pages

    async def home(request: Request, session: Session) -> Response:
        def read() -> Response:
            try:
                with data.published(warehouse.analytics_path) as conn:
                    orgs = data.organizations(conn)
            except data.NothingYet as error:
                return render(request, "message.html.j2", session, title="Nothing to review yet", message=str(error))
            if len(orgs) == 1:
                return RedirectResponse(f"/o/{orgs[0].org}/", status_code=303)
            return render(request, "orgs.html.j2", session, orgs=orgs)

        return await run_in_threadpool(read)

    def overview(request: Request, session: Session, conn, org: data.OrgRun) -> Response:
        precision = data.rows(listing.precision_by_band(conn, org.org))
        return render(request, "overview.html.j2", session, org=org, todo=data.to_do(conn, org.org), precision=precision)

    def result_rows(request: Request, session: Session, conn, org: data.OrgRun) -> Response:
        flt, offset, limit = _filter(request), _offset(request), _limit(request)
        page = listing.reconciliation_page(conn, org.org, flt, offset, limit)
        return render(request, "rows.html.j2", session, org=org, page=page, rows=data.rows(page.rows), flt=flt,
                      bands=listing.score_bands(), fields=data.difference_fields(conn, org.org),
                      institutions=data.institutions_like(conn, org.org), query=_query(request))

    def matches(request: Request, session: Session, conn, org: data.OrgRun) -> Response:
        flt = _filter(request, status="probable_match")
        page = listing.reconciliation_page(conn, org.org, flt, _offset(request), _limit(request))
        found = data.rows(page.rows)
        decided = data.pair_decisions(conn, org.org, [(r["kol_id"], r["crm_id"]) for r in found])
        return render(request, "matches.html.j2", session, org=org, page=page, rows=found, decided=decided, flt=flt,
                      bands=listing.score_bands(), institutions=data.institutions_like(conn, org.org),
                      query=_query(request))

    def duplicate_sets(request: Request, session: Session, conn, org: data.OrgRun) -> Response:
        page = listing.duplicate_sets_page(conn, org.org, _offset(request), _limit(request))
        return render(request, "duplicates.html.j2", session, org=org, page=page, sets=data.rows(page.rows),
                      query=_query(request))

    def plan(request: Request, session: Session, conn, org: data.OrgRun) -> Response:
        flt = _filter(request)
        page = listing.plan_page(conn, org.org, flt, _offset(request), _limit(request))
        return render(request, "plan.html.j2", session, org=org, page=page, rows=data.rows(page.rows), flt=flt,
                      fields=listing.plan_fields(conn, org.org), todo=data.to_do(conn, org.org),
                      institutions=data.institutions_like(conn, org.org), query=_query(request),
                      writable=config.crm is not None and getattr(config.crm, "writable", False))

    def audit(request: Request, session: Session, conn, org: data.OrgRun) -> Response:
        action = request.query_params.get("action") or None
        kol_id = (request.query_params.get("kol_id") or "").strip() or None
        page = listing.audit_page(conn, org.org, _offset(request), _limit(request), kol_id=kol_id,
                                  action=action if action in AUDIT_ACTIONS else None)
        return render(request, "audit.html.j2", session, org=org, page=page, rows=data.rows(page.rows),
                      action=action, kol_id=kol_id, actions=AUDIT_ACTIONS, query=_query(request),
                      window_days=_undo_window())

    def decisions(request: Request, session: Session, conn, org: data.OrgRun) -> Response:
        return render(request, "decisions.html.j2", session, org=org, report=None, error=None)

    async def download(request: Request, session: Session) -> Response:
        org, name = request.path_params["org"], request.path_params["name"]
        if name not in DOWNLOADS or not ORG_NAME.fullmatch(org):
            return refused(request, session, "No such file.", 404)
        path = reports_dir(config.data_dir, org) / DOWNLOADS[name]
        try:
            handle = await run_in_threadpool(open, path, "rb")
        except (FileNotFoundError, IsADirectoryError):
            return refused(request, session, f"No {name} for organization {org!r} yet: run `commops reconcile`.", 404)
        # Streamed from the file as it was opened: a night replaces it by a rename, so this download stays whole.
        return StreamingResponse(_blocks(handle), media_type="text/csv; charset=utf-8",
                                 headers={"content-disposition": f'attachment; filename="{org}-{name}"',
                                          "content-length": str(os.fstat(handle.fileno()).st_size)})

    # ------------------------------------------------------------------ actions

    async def decide_matches(request: Request, session: Session) -> Response:
        org, form = request.path_params["org"], request.state.form
        one = _text(form, "one")
        if one:
            decision, _, pair = one.partition("|")
            chosen = [(decision, *_pair(pair))]
        else:
            decision = _text(form, "selected") or ""
            chosen = [(decision, *_pair(value)) for value in form.getlist("pair") if isinstance(value, str)]
        chosen = [c for c in chosen if c[1] and c[2]]
        if decision not in ("confirm", "reject") or not chosen:
            session.flash("refused", "Select at least one pair, then Confirm or Reject.")
        else:
            try:
                report = await run_in_threadpool(actions.decide_pairs, warehouse, config.crm, org, chosen, session.user)
                _flash_report(session, data.rows(report))
            except actions.ActionRefused as error:
                session.flash("refused", str(error))
        return _back(request, f"/o/{org}/matches")

    async def choose_master(request: Request, session: Session) -> Response:
        org, form = request.path_params["org"], request.state.form
        set_id, crm_id = _text(form, "set") or "", _text(form, "master") or ""
        try:
            await run_in_threadpool(actions.choose_master, warehouse, org, set_id, crm_id, session.user)
            session.flash("ok", f"Contact {crm_id} is the master of {set_id}: the merge file follows it.")
        except actions.ActionRefused as error:
            session.flash("refused", str(error))
        return _back(request, f"/o/{org}/duplicates")

    async def decide_plan(request: Request, session: Session) -> Response:
        org, form = request.path_params["org"], request.state.form
        kwargs: dict[str, Any]
        if _text(form, "row"):
            decision, _, key = (_text(form, "row") or "").partition("|")
            kwargs, what = {"plan_keys": [key]}, "1 change"
        elif _text(form, "kol"):
            decision, _, kol_id = (_text(form, "kol") or "").partition("|")
            kwargs, what = {"kol_ids": [kol_id]}, f"every change of {kol_id}"
        elif _text(form, "selected"):
            decision = _text(form, "selected") or ""
            keys = [k for k in form.getlist("key") if isinstance(k, str)]
            kwargs, what = {"plan_keys": keys}, f"{len(keys)} selected changes"
        else:
            decision = _text(form, "matching") or ""
            kwargs, what = {"flt": _filter_from(form)}, "every change matching the filter"
        if decision not in approvals.DECISIONS or not any(kwargs.values()):
            session.flash("refused", "Select at least one change, then Approve or Exclude.")
            return _back(request, f"/o/{org}/plan")

        def decide() -> int:
            with warehouse.writer() as writer:
                if "flt" in kwargs:
                    count = approvals.set_decision_matching(writer.conn, org, session.user, decision, kwargs["flt"])
                else:
                    count = approvals.set_decision(writer.conn, org, session.user, decision, **kwargs)
            warehouse.publish_analytics()
            return count

        count = await run_in_threadpool(decide)
        verb = {"approve": "Approved", "exclude": "Excluded", "clear": "Cleared the decision on"}[decision]
        session.flash("ok", f"{verb} {what}: {count:,} planned field value{'s' if count != 1 else ''}.")
        return _back(request, f"/o/{org}/plan")

    async def apply_approved(request: Request, session: Session) -> Response:
        org = request.path_params["org"]
        try:
            outcome = await run_in_threadpool(actions.apply_approved, warehouse, config.crm, org, session.user)
        except actions.ActionRefused as error:
            session.flash("refused", str(error))
            return RedirectResponse(f"/o/{org}/plan", status_code=303)
        rows = data.rows(outcome)
        if not rows:
            session.flash("refused", "Nothing is approved: approve changes first (nothing was written).")
            return RedirectResponse(f"/o/{org}/plan", status_code=303)
        return render(request, "outcome.html.j2", session, org={"org": org}, rows=rows, title="Approved changes applied")

    async def undo(request: Request, session: Session) -> Response:
        org, audit_id = request.path_params["org"], _text(request.state.form, "audit_id") or ""
        try:
            outcome = await run_in_threadpool(actions.undo, warehouse, config.crm, org, audit_id, session.user)
        except actions.ActionRefused as error:
            session.flash("refused", f"Undo refused: {error}")
        else:
            row = data.rows(outcome)[0]
            if row["mode"] == "applied":
                session.flash("ok", f"Undone: {row['field']} of contact {row['crm_id']} is "
                                    f"{_shown(row['crm_value_after'])} again (read back; audited).")
            else:
                session.flash("refused", f"Undo failed: {row['error']} (audited).")
        return _back(request, f"/o/{org}/audit")

    async def upload_decisions(request: Request, session: Session) -> Response:
        org, form = request.path_params["org"], request.state.form
        upload = form.get("file")
        if not isinstance(upload, UploadFile) or not upload.filename:
            return render(request, "decisions.html.j2", session, org={"org": org}, report=None, status=400,
                          error="Choose a CSV file to upload.")
        content = await upload.read()
        try:
            report = await run_in_threadpool(actions.apply_decisions_file, warehouse, config.crm, org, content,
                                             session.user)
        except actions.ActionRefused as error:
            return render(request, "decisions.html.j2", session, org={"org": org}, report=None, status=400,
                          error=f"{upload.filename}: {error}")
        return render(request, "decisions.html.j2", session, org={"org": org}, report=data.rows(report), error=None,
                      filename=upload.filename)

    async def not_found(request: Request, exc: Exception) -> Response:
        return refused(request, access.sessions.get(request.cookies.get(COOKIE)), "No such page.", 404)

    def org_route(path: str, get: Callable[..., Response] | None = None, post: Handler | None = None) -> Route:
        async def endpoint(request: Request) -> Response:
            return await (signed_in(reading(get)) if request.method == "GET" else signed_in(post))(request)

        methods = (["GET"] if get else []) + (["POST"] if post else [])
        return Route("/o/{org}" + path, endpoint, methods=methods)

    routes = [
        Route("/", signed_in(home), methods=["GET"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", signed_in(logout), methods=["POST"]),
        org_route("/", overview),
        org_route("/rows", result_rows),
        org_route("/matches", matches, decide_matches),
        org_route("/duplicates", duplicate_sets, choose_master),
        Route("/o/{org}/files/{name}", signed_in(download), methods=["GET"]),
        org_route("/plan", plan, decide_plan),
        org_route("/plan/apply", post=apply_approved),
        org_route("/audit", audit),
        org_route("/audit/undo", post=undo),
        org_route("/decisions", decisions, upload_decisions),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guard, hosts=config.hosts)],
                     exception_handlers={404: not_found})


# ---------------------------------------------------------------------- request helpers


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def _pair(value: str) -> tuple[str, str]:
    kol_id, _, crm_id = value.partition("|")
    return kol_id, crm_id


def _offset(request: Request) -> int:
    value = request.query_params.get("offset", "0")
    return int(value) if value.isdigit() else 0


def _limit(request: Request) -> int:
    value = request.query_params.get("limit", "")
    return int(value) if value.isdigit() and int(value) in PAGE_SIZES else 50


def _filter(request: Request, **fixed: str) -> listing.Filter:
    return _filter_from(request.query_params, **fixed)


def _filter_from(values: Any, **fixed: str) -> listing.Filter:
    """The filter of a query string or a form (`f_` fields: the filter a page was showing); `fixed` wins."""

    def value(name: str) -> str | None:
        if name in fixed:
            return fixed[name]
        found = values.get(name, values.get(f"f_{name}"))
        return found.strip() or None if isinstance(found, str) else None

    status = value("status")
    return listing.Filter(status=status if status in STATUSES or status in PLAN_ACTIONS else None,
                          score_band=value("score_band"), field=value("field"), institution=value("institution"),
                          text=value("text"), decision=value("decision"))


def _query(request: Request) -> Callable[..., str]:
    """query(offset=100): this page's query string with some parameters replaced (None drops one)."""

    def query(**changes: Any) -> str:
        params = {k: v for k, v in request.query_params.items() if v}
        params.update({k: str(v) for k, v in changes.items() if v is not None})
        for k, v in changes.items():
            if v is None:
                params.pop(k, None)
        return "?" + urlencode(params) if params else "?"

    return query


def _back(request: Request, path: str) -> Response:
    """303 to `path` with the query string the form came from (hidden field `back`), never another site."""
    back = _text(request.state.form, "back") or ""
    return RedirectResponse(path + (back if back.startswith("?") else ""), status_code=303)


def _flash_report(session: Session, report: list[dict[str, Any]]) -> None:
    for decision, done in (("confirm", "confirmed (the contact carries the KOL id in Salesforce)"),
                           ("reject", "rejected (never proposed again)")):
        taken = sum(1 for r in report if r["taken"] and r["decision"] == decision)
        if taken:
            session.flash("ok", f"{taken} pair{'s' if taken != 1 else ''} {done}; audited.")
    for r in report:
        if not r["taken"]:
            session.flash("refused", f"{r['kol_id']} / {r['crm_id']}: {r['reason']}")


def _shown(value: str | None) -> str:
    return "empty" if value is None else repr(value)


def _undo_window() -> int:
    from crm.undo import undo_window_days

    return undo_window_days()


def _blocks(handle: BinaryIO) -> Iterator[bytes]:
    """The open file's bytes a block at a time (Starlette reads an iterator in its thread pool), then closed."""
    with handle:
        while block := handle.read(DOWNLOAD_BLOCK):
            yield block
