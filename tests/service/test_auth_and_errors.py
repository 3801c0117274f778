"""Authentication, scopes, organization isolation and the error envelope."""

from __future__ import annotations

import httpx
import pytest

from service.server import ServiceServer
from service.settings import ServiceSettings
from service.store.db import connect
from tests.service.conftest import bearer, error_of

ENDPOINTS = [("GET", "/kols"), ("POST", "/kols"), ("GET", "/campaigns"), ("POST", "/campaigns"),
             ("GET", "/products"), ("GET", "/signals")]
SCOPES = {("GET", "/kols"): "kols:read", ("POST", "/kols"): "kols:write", ("GET", "/campaigns"): "campaigns:read",
          ("POST", "/campaigns"): "campaigns:write", ("GET", "/products"): "products:read",
          ("GET", "/signals"): "signals:read"}


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_missing_key_is_401_with_rate_limit_headers(server, method, path):
    response = httpx.request(method, server.base_url + path, json={})
    error_of(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"
    assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= set(response.headers)


@pytest.mark.parametrize("header", ["Bearer cos_unknown", "Basic abc", "Bearer", "cos_nobearer"])
def test_unknown_or_malformed_key_is_401(server, header):
    error_of(httpx.get(server.base_url + "/kols", headers={"Authorization": header}), 401, "unauthorized")


def test_revoked_key_is_401(server, dataset):
    details = error_of(httpx.get(server.base_url + "/kols", headers=bearer(dataset.revoked_key)), 401, "unauthorized")
    assert details == {}


@pytest.mark.parametrize(("method", "path"), [e for e in ENDPOINTS if e != ("GET", "/kols")])
def test_missing_scope_is_403_naming_it(server, dataset, method, path):
    response = httpx.request(method, server.base_url + path, headers=bearer(dataset.read_only_key), json={})
    details = error_of(response, 403, "insufficient_scope")
    assert details == {"required_scope": SCOPES[(method, path)]}
    assert SCOPES[(method, path)] in response.json()["error"]["message"]


def test_read_scope_suffices_for_reading_kols(server, dataset):
    assert httpx.get(f"{server.base_url}/kols/{dataset.kol['ana']}", headers=bearer(dataset.read_only_key)
                     ).status_code == 200


def test_another_organizations_kol_is_404(api, dataset):
    error_of(api.get(f"/kols/{dataset.other_kol}"), 404, "not_found")


def test_lists_show_only_the_callers_organization(server, dataset):
    other = httpx.get(f"{server.base_url}/kols", headers=bearer(dataset.other_key), params={"per_page": 100}).json()
    assert dataset.other_kol in {k["id"] for k in other["data"]}
    assert dataset.kol["ana"] not in {k["id"] for k in other["data"]}
    for path in ("/campaigns", "/products", "/signals"):
        assert httpx.get(server.base_url + path, headers=bearer(dataset.other_key)).json()["meta"]["total"] == 0


def test_openapi_document_needs_no_key(server):
    response = httpx.get(f"{server.base_url}/openapi.json")
    assert response.status_code == 200 and response.json()["openapi"].startswith("3.")


def test_malformed_json_is_400_invalid_json(api):
    response = api.post("/kols", content=b'{"full_name": "x",', headers={"Content-Type": "application/json"})
    error_of(response, 400, "invalid_json")


def test_non_object_json_body_is_400(api):
    details = error_of(api.post("/kols", json=["x"]), 400, "invalid_request")
    assert details["field"] == "body"


def test_empty_body_is_400_missing(api):
    details = error_of(api.post("/kols", content=b"", headers={"Content-Type": "application/json"}),
                       400, "invalid_request")
    assert details == {"field": "body", "reason": "missing"}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_wrong_content_type_is_415(api, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    request = api.build_request("POST", "/kols", content=b'{"full_name": "x", "specialties": ["a"]}', headers=headers)
    assert content_type is not None or "content-type" not in request.headers
    error_of(api.send(request), 415, "unsupported_media_type")


def test_json_content_type_with_charset_is_accepted(api):
    response = api.post("/kols", content=b'{"full_name": "Charset", "specialties": ["a"]}',
                        headers={"Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 201, response.text


def test_unknown_route_is_404_envelope(api):
    error_of(api.get("/nothing-here"), 404, "not_found")


def test_wrong_method_is_405_envelope(api):
    response = api.delete("/kols")
    error_of(response, 405, "method_not_allowed")
    assert "GET" in response.headers["allow"]


def test_errors_never_use_the_422_shape(api):
    response = api.post("/campaigns", json={"name": 1})
    assert response.status_code == 400 and "detail" not in response.json()


def test_an_internal_error_is_a_bare_500_envelope(tmp_path):
    """A broken database (a table removed under the running service) yields 500 without internals."""
    from service import admin

    db = tmp_path / "broken.db"
    org = admin.create_org(db, "Broken", "starter")
    key = admin.create_key(db, org, "all")
    with ServiceServer(ServiceSettings(db=db)) as running:
        conn = connect(db)
        conn.execute("DROP TABLE signal_products")
        conn.execute("DROP TABLE signals")
        conn.close()
        response = httpx.get(f"{running.base_url}/signals", headers=bearer(key))
        assert error_of(response, 500, "internal_error") == {}
        assert "signals" not in response.text.lower().replace("/signals", "")
        assert "x-ratelimit-limit" in response.headers
