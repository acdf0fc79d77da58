"""Standard Webhooks signatures (https://www.standardwebhooks.com), and the checks of inbound events signed
either that way or with a ``sha256=<hex>`` body signature.

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
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from jobengine.core.webhooks.model import InvalidWebhook

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
    """The ``X-Scheduler-Signature`` (or ``X-Signature``) value a sender puts on an inbound event:
    ``sha256=<hex HMAC-SHA256 of the body>``, keyed by the secret's UTF-8 bytes."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_inbound(secret: str, body: bytes, header: str | None) -> bool:
    """Constant-time check of a ``sha256=<hex>`` header over the raw body."""
    if not header:
        return False
    return hmac.compare_digest(inbound_signature(secret, body).encode(), header.strip().lower().encode())


#: The headers that carry a ``sha256=<hex>`` body signature: the scheduler this engine replaces, then ours.
HEX_HEADERS: Final = ("x-scheduler-signature", "x-signature")
_ID_RE: Final = re.compile(r"[\x21-\x7e]{1,255}")
_STAMP_RE: Final = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True, slots=True)
class InboundProof:
    """What a valid signature proves: the event's id (``webhook-id``, or ``sha256:<hex>`` of a body signed
    without one, so the same body is the same event) and the signed time (None: the style signs none)."""

    event_id: str
    timestamp: int | None = None


def inbound_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks signature, derived as the reference libraries do: ``whsec_`` taken
    off, the rest base64-decoded (padding added, other characters skipped); a secret that decodes to nothing
    is used as its UTF-8 bytes."""
    try:
        return base64.b64decode(secret.removeprefix(PREFIX) + "==") or secret.encode()
    except (binascii.Error, ValueError):
        return secret.encode()


def verify_inbound_request(secret: str, body: bytes, headers: Mapping[str, str]) -> InboundProof | None:
    """Check an inbound event's signature with ``secret``; ``headers`` are looked up by lower-case name.

    With ``webhook-signature`` present (Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` in UNIX
    seconds, ``webhook-signature: v1,<base64>`` one or more, space-separated), only that style counts: a
    ``v1`` signature of ``{id}.{timestamp}.{body}`` must match. Otherwise ``X-Scheduler-Signature`` or
    ``X-Signature: sha256=<hex>`` over the body. None when nothing matches (no header, a malformed one, a
    wrong signature): the caller cannot tell these apart, and neither can the sender. Constant-time."""
    signatures = headers.get("webhook-signature")
    if signatures is not None:
        msg_id, stamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
        if not _ID_RE.fullmatch(msg_id) or not _STAMP_RE.fullmatch(stamp):
            return None
        digest = hmac.new(inbound_key(secret), f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
        expected = base64.b64encode(digest)
        ok = False
        for part in signatures.split()[:10]:
            version, _, value = part.partition(",")
            ok |= version == "v1" and hmac.compare_digest(expected, value.encode())
        return InboundProof(msg_id, int(stamp)) if ok else None
    for name in HEX_HEADERS:
        header = headers.get(name)
        if header is not None:
            if verify_inbound(secret, body, header):
                return InboundProof("sha256:" + header.strip().lower().removeprefix("sha256="))
            return None
    return None
