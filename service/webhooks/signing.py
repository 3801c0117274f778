"""Delivery signatures: the spec's hex HMAC and the Standard Webhooks headers.

Both use the webhook secret's UTF-8 bytes as the HMAC-SHA256 key. The spec's secret is
an opaque string, not a Standard Webhooks `whsec_<base64>` value: a receiver using a
Standard Webhooks library passes it `"whsec_" + base64(secret.encode())`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from commops_spec.constants import WEBHOOK_SIGNATURE_HEADER


def generate_secret() -> str:
    """256 random bits as 64 lower-case hex characters."""
    return secrets.token_hex(32)


def hex_signature(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def standard_signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()


def delivery_headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Headers of one attempt; the timestamp is the attempt's, so retries carry a fresh one."""
    return {
        "Content-Type": "application/json",
        WEBHOOK_SIGNATURE_HEADER: hex_signature(secret, body),
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": standard_signature(secret, message_id, timestamp, body),
        "User-Agent": "commops-service-webhooks/1",
    }
