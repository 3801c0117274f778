"""Managing the service's webhooks through its API (part 4.8), for `commops webhooks ...`.

Reads the pipeline's COMMOPS_BASE_URL (including /v1) and COMMOPS_API_KEY. Errors are
SubscriptionError with one line saying what to do, e.g. `403: this key lacks scope webhooks:write`.

`register` generates the secret here (256 random bits), writes it to the secrets file the
receiver reads ($COMMOPS_DATA_DIR/webhook-secrets.json, mode 0600) *before* registering,
so the very first delivery already verifies; the secret is never printed or logged. A webhook of a
registered organization (`Subscriptions.for_org`) is managed with that organization's service and key,
and its secret is bound to its organization id: the receiver accepts it for that organization's events only.
"""

from __future__ import annotations

import math
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from resources.commops_api import item_path
from resources.settings import API_KEY_ENV, BASE_URL_ENV, SettingsError, not_set
from webhooks.secrets_file import (
    bound_organization,
    forget_secret,
    generate_secret,
    rename_secret,
    retire_secret,
    store_secret,
)

if TYPE_CHECKING:
    from resources.orgs import Org

# A deleted webhook's secret stays accepted this long: the service lets attempts already in
# flight finish (each has a 10 s deadline by default), and they must not be refused.
DEFAULT_GRACE_SECONDS = 300.0


class SubscriptionError(RuntimeError):
    """A webhook operation failed; the message is one line naming the variable, scope or id."""


# ---------------------------------------------------------------- the API


class Subscriptions:
    """Calls the webhook endpoints; `Subscriptions.from_env()` reads COMMOPS_BASE_URL and COMMOPS_API_KEY."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0, api_key_env: str = API_KEY_ENV,
                 organization_id: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.organization_id = organization_id  # new secrets are bound to it
        self._api_key_env = api_key_env  # named in messages: where the key came from
        self._client = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )

    @classmethod
    def from_env(cls) -> Subscriptions:
        """The service of the environment's organization `default` (COMMOPS_BASE_URL, checked as the sync
        checks it) with the key in COMMOPS_API_KEY."""
        from resources.orgs import default_org  # the Dagster resources beside it load only when needed

        try:
            org = default_org()
            if org is None:
                raise not_set(BASE_URL_ENV)
            return cls(org.base_url, org.api_key())
        except SettingsError as exc:
            raise SubscriptionError(str(exc)) from None

    @classmethod
    def for_org(cls, org: Org) -> Subscriptions:
        """The service of a registered organization, with the key in its variable; SubscriptionError when
        the organization has no organization id (its secret could not be bound) or its key is not set."""
        if not org.organization_id:
            raise SubscriptionError(f"organization {org.name} has no organization id, so its secret cannot be bound "
                                    f"to it: register it with --organization-id org_... (commops orgs add)")
        try:
            return cls(org.base_url, org.api_key(), api_key_env=org.api_key_env, organization_id=org.organization_id)
        except SettingsError as exc:
            raise SubscriptionError(str(exc)) from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Subscriptions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, url: str, events: list[str], secrets_file: Path,
                 organization_id: str | None = None) -> dict[str, Any]:
        """Register `url` for `events` with a fresh secret stored in `secrets_file`, bound to `organization_id`
        (default: this service's organization, when it is a registered organization's); the webhook record."""
        secret = generate_secret()
        provisional = f"registering-{uuid.uuid4().hex}"
        organization_id = organization_id or self.organization_id
        bound = {"organization_id": organization_id} if organization_id else {}
        store_secret(secrets_file, provisional, secret, url=url, **bound)
        try:
            created = self._call("POST", "/webhooks", json={"url": url, "events": events, "secret": secret})
        except BaseException:
            forget_secret(secrets_file, provisional)
            raise
        created.pop("secret", None)
        rename_secret(secrets_file, provisional, created["id"])
        return created

    def list(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            body = self._call("GET", "/webhooks", params={"page": page, "per_page": 100}, whole=True)
            found.extend(body["data"])
            if page * 100 >= body["meta"]["total"] or not body["data"]:
                return found
            page += 1

    def get(self, webhook_id: str) -> dict[str, Any]:
        for webhook in self.list():
            if webhook["id"] == webhook_id:
                return webhook
        raise SubscriptionError(f"no webhook {webhook_id} for this key (404): see `commops webhooks list`")

    def update(self, webhook_id: str, events: list[str] | None = None, enabled: bool | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if events is not None:
            body["events"] = events
        if enabled is not None:
            body["enabled"] = enabled
        if not body:
            raise SubscriptionError("nothing to update: pass --events and/or --enable/--disable")
        return self._call("PATCH", item_path("/webhooks/{id}", id=webhook_id), json=body)

    def delete(self, webhook_id: str, secrets_file: Path | None = None,
               grace_seconds: float = DEFAULT_GRACE_SECONDS) -> None:
        """Delete the webhook (its queued deliveries are cancelled); its secret stays accepted
        for `grace_seconds` (attempts in flight), then leaves the secrets file."""
        self._call("DELETE", item_path("/webhooks/{id}", id=webhook_id))
        if secrets_file is not None:
            retire_secret(secrets_file, webhook_id, grace_seconds)

    def test(self, webhook_id: str, event: str) -> dict[str, Any]:
        return self._call("POST", item_path("/webhooks/{id}/test", id=webhook_id), json={"event": event})

    def oldest_pending_delivery(self, webhook_id: str) -> dict[str, Any] | None:
        """The oldest delivery of the webhook still waiting to be sent (None: nothing waits)."""
        params = {"status": "pending", "per_page": 100}
        deliveries = item_path("/webhooks/{id}/deliveries", id=webhook_id)
        first = self._call("GET", deliveries, params={**params, "page": 1}, whole=True)
        total = first["meta"]["total"]
        if not total:
            return None
        last_page = math.ceil(total / 100)
        body = first if last_page == 1 else self._call(
            "GET", deliveries, params={**params, "page": last_page}, whole=True)
        items = body["data"] or first["data"]
        return min(items, key=lambda d: d["created_at"]) if items else None

    def rotate(self, webhook_id: str, secrets_file: Path, timeout: float = 600.0,
               poll_seconds: float = 1.0, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> dict[str, Any]:
        """Replace a webhook by a new one with the same URL and events and a new secret.

        1. register the new webhook (its secret joins the secrets file: both are accepted);
        2. wait until the old webhook has no pending delivery created before the new one
           (every later event is also queued for the new webhook), at most `timeout` s;
        3. delete the old webhook; its secret stays accepted for `grace_seconds` more.
        The new secret is bound to the old one's organization, if any. Returns the new webhook record.
        """
        old = self.get(webhook_id)
        new = self.register(old["url"], old["events"], secrets_file, bound_organization(secrets_file, webhook_id))
        deadline = time.monotonic() + timeout
        while True:
            oldest = self.oldest_pending_delivery(webhook_id)
            if oldest is None or oldest["created_at"] > new["created_at"]:
                break
            if time.monotonic() > deadline:
                raise SubscriptionError(
                    f"{webhook_id} still has deliveries from before {new['id']} after {timeout:.0f} s; both stay "
                    f"registered and accepted: delete {webhook_id} once `GET /v1/webhooks/{webhook_id}/deliveries"
                    f"?status=pending` has none older than {new['created_at']}"
                )
            time.sleep(poll_seconds)
        self.delete(webhook_id, secrets_file, grace_seconds)
        return new

    def _call(self, method: str, path: str, *, whole: bool = False, **kwargs: Any) -> Any:
        url = self.base_url + path
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise SubscriptionError(f"cannot reach {url}: {exc.__class__.__name__}: {exc}; check {BASE_URL_ENV}") from None
        if response.status_code >= 400:
            raise SubscriptionError(_explain(response, method, url, self._api_key_env))
        try:
            body = response.json()
        except ValueError:
            raise SubscriptionError(f"{method} {url} answered {response.status_code} without JSON: is {BASE_URL_ENV} "
                                    "the service address including /v1?") from None
        return body if whole else body["data"]


def _explain(response: httpx.Response, method: str, url: str, api_key_env: str = API_KEY_ENV) -> str:
    status = response.status_code
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    details = error.get("details") or {}
    message = error.get("message") or response.reason_phrase
    if status == 401:
        return f"API key rejected (401) by {url}: check {api_key_env}"
    if status == 403:
        scope = details.get("required_scope") or "webhooks:write"
        return f"403: this key lacks scope {scope}"
    if status == 404:
        if error:
            return f"404 from {method} {url}: {message} (see `commops webhooks list`)"
        return f"404 from {method} {url}: is {BASE_URL_ENV} the service address including /v1?"
    if status == 400 and error.get("code") == "private_address":
        return (f"400: {message} (a local service needs COMMOPS_SERVICE_WEBHOOK_ALLOW_PRIVATE=true; "
                "in production register the receiver's public URL)")
    if status == 429:
        return f"429 rate limited by {url}: retry in {response.headers.get('retry-after', 'a few')} s"
    return f"{status} from {method} {url}: {message}"

