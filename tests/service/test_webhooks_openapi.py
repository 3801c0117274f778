"""schemathesis against the webhook operations of /v1/openapi.json: no 500s, no response
that violates the document. Path ids point at a real, freshly registered webhook, so the
fuzzed bodies and parameters reach the handlers instead of stopping at a 404."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from commops_spec.constants import EVENTS
from tests.service.webhook_support import WebhookService, webhook_service

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[WebhookService]:
    with webhook_service(tmp_path_factory.mktemp("webhooks-openapi") / "service.db") as service:
        yield service


def test_the_webhook_operations_conform_to_the_openapi_document(api, rx):
    schema = schemathesis.openapi.from_url(f"{api.server.base_url}/openapi.json").include(path_regex=r"^/v1/webhooks")
    headers = {"Authorization": f"Bearer {api.key}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 9
    with api.client() as client:

        def fresh_webhook() -> str:
            response = client.post("/webhooks", json={"url": rx.url("/fuzz"), "events": list(EVENTS)})
            return response.json()["data"]["id"]

        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            def conforms(case):
                if case.path_parameters and "webhook_id" in case.path_parameters:
                    case.path_parameters["webhook_id"] = fresh_webhook()
                case.call_and_validate(headers=headers, checks=CHECKS)

            conforms()
