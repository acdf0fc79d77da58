"""Standard Webhooks signatures (https://www.standardwebhooks.com) and the inbound ``sha256=<hex>`` check.

A delivery carries ``webhook-id`` (the delivery id: the same on every retry, so a receiver can deduplicate),
``webhook-timestamp`` (UNIX seconds of this attempt) and ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of
"{id}.{timestamp}.{body}">``, one per valid secret separated by a space (two during a rotation). Secrets are
``whsec_<base64 of 32 random bytes>``; the HMAC key is the decoded bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from typing import Final

from jobengine.webhooks.model import InvalidWebhook

PREFIX: Final = "whsec_"


def new_secret() -> str:
    return PREFIX + base64.b64encode(os.urandom(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret. Raises InvalidWebhook (field ``secret``) for a malformed one."""
    if not isinstance(secret, str) or not secret.startswith(PREFIX):
        raise InvalidWebhook("secret", "must be 'whsec_' followed by base64 (24 to 64 bytes)")
    try:
        key = base64.b64decode(secret[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidWebhook("secret", "must be 'whsec_' followed by base64 (24 to 64 bytes)") from None
    if not 24 <= len(key) <= 64:
        raise InvalidWebhook("secret", "must be 'whsec_' followed by base64 (24 to 64 bytes)")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: str) -> str:
    digest = hmac.new(secret_key(secret), f"{msg_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(msg_id: str, timestamp: int, body: str, secrets: tuple[str, ...]) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(s, msg_id, timestamp, body) for s in secrets),
    }


def inbound_signature(secret: str, body: bytes) -> str:
    """The ``X-Signature`` value a sender puts on an inbound hook: ``sha256=<hex HMAC-SHA256 of the body>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_inbound(secret: str, body: bytes, header: str | None) -> bool:
    """Constant-time check of an ``X-Signature: sha256=<hex>`` header over the raw body."""
    if not header:
        return False
    return hmac.compare_digest(inbound_signature(secret, body).encode(), header.strip().lower().encode())
