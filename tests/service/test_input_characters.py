"""Characters the spec leaves open, refused the safe way: NUL and control characters in
query parameters, NUL anywhere in a body, names of white space only."""

from __future__ import annotations

import pytest

from tests.service.conftest import error_of

EMAIL = {"subject": "Hello", "body_html": "<p>Hi</p>"}


def campaign(**changes):
    return {"name": "Limits", "type": "newsletter", "audience": {"external_contacts": ["a@partner.example"]},
            "email": dict(EMAIL), **changes}


@pytest.mark.parametrize("path", ["/kols", "/campaigns", "/products", "/signals"])
def test_a_nul_in_a_search_term_is_400_not_a_shorter_term(api, path):
    details = error_of(api.get(path, params={"search": "a\x00zzzz"}), 400, "invalid_request")
    assert details == {"field": "search", "reason": "invalid_character", "location": "query"}


@pytest.mark.parametrize(("params", "field"), [({"tags": "advisor\x00"}, "tags"), ({"search": "ana\nlopez"}, "search"),
                                               ({"tier": "tier_1\x7f"}, "tier")])
def test_control_characters_in_any_query_parameter_are_400(api, params, field):
    assert error_of(api.get("/kols", params=params), 400, "invalid_request")["field"] == field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"full_name": "Ann\u0000Lee", "specialties": ["cardiology"]}, "full_name"),
        ({"full_name": "Ann Lee", "specialties": ["cardiology"], "bio": "x\u0000"}, "bio"),
        ({"full_name": "Ann Lee", "specialties": ["cardiology"], "location": {"city": "\u0000"}}, "location.city"),
        ({"full_name": "Ann Lee", "specialties": ["cardiology"], "tags": ["ok", "b\u0000d"]}, "tags.1"),
    ],
)
def test_a_nul_anywhere_in_a_kol_body_is_400_naming_the_field(api, body, field):
    details = error_of(api.post("/kols", json=body), 400, "invalid_request")
    assert details == {"field": field, "reason": "invalid_character"}


def test_a_nul_in_a_campaign_or_webhook_body_is_400(api, server):
    bad_email = {**EMAIL, "body_html": "<p>\u0000</p>"}
    assert error_of(api.post("/campaigns", json=campaign(email=bad_email)), 400, "invalid_request") == {
        "field": "email.body_html", "reason": "invalid_character"}
    secret = "s" * 20 + "\u0000"
    details = error_of(api.post("/webhooks", json={"url": "https://example.com/h", "events": ["kol.created"],
                                                   "secret": secret}), 400, "invalid_request")
    assert details == {"field": "secret", "reason": "invalid_character"}


def test_newlines_stay_allowed_in_long_texts(api, unique_email):
    response = api.post("/kols", json={"full_name": "Multi Line", "specialties": ["cardiology"],
                                       "email": unique_email, "bio": "line one\nline two"})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/kols", {"full_name": "   ", "specialties": ["cardiology"]}, "full_name"),
        ("/kols", {"full_name": "\t\n\u00a0\u2003", "specialties": ["cardiology"]}, "full_name"),  # Unicode spaces
        ("/kols", {"full_name": "Ann Lee", "specialties": ["cardiology"], "tags": ["ok", "  "]}, "tags.1"),
        ("/campaigns", campaign(name=" \t "), "name"),
        ("/campaigns", campaign(email={**EMAIL, "subject": "  "}), "email.subject"),
    ],
)
def test_names_of_only_white_space_are_400_blank(api, path, body, field):
    details = error_of(api.post(path, json=body), 400, "invalid_request")
    assert details["field"] == field and details["reason"] == "blank"
