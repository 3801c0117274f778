"""API key scopes: the spec's (part 5) plus the service's own extension.

`webhooks:write` (register, change, delete, test and redeliver webhooks) is not in the
spec, which names no scope for webhook endpoints: docs/spec-decisions.md#hardening.
A key created with `all` holds every scope here; keys created with `all` before
webhooks:write existed were granted it by the schema migration (service/store/db.py).
"""

from __future__ import annotations

from commops_spec.constants import SCOPES as SPEC_SCOPES

WEBHOOKS_WRITE = "webhooks:write"
EXTENSION_SCOPES = (WEBHOOKS_WRITE,)
ALL_SCOPES = (*SPEC_SCOPES, *EXTENSION_SCOPES)
