"""API key text, dashboard session tokens, hashing and scopes (pure: no storage).

A key reads ``je_<id>_<secret>``: ``id`` (12 hex characters) is public and names the stored row, so a
lookup is one indexed read; ``secret`` (32 random bytes, base64url) is what makes the key. Only the
sha256 of the whole text is stored: a high-entropy secret needs no slow password hash, because there is
nothing to guess. Comparison is constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from typing import Final

#: Every scope a key can carry. ``admin`` implies all the others.
SCOPES: Final = (
    "jobs:read",  # jobs, dead-letters, queue depths, events and streams
    "jobs:write",  # enqueue, cancel, retry, replay, purge
    "queues:write",  # pause, resume, limits (queues are shared lanes: an operator's action)
    "schedules:read",  # schedules, runs, failure signatures
    "schedules:write",  # create / change schedules, trigger runs, change a signature's status
    "graph:read",  # graphs of jobs and their nodes
    "graph:write",  # submit, cancel, retry graphs
    "worker",  # the worker protocol: claim, heartbeat, report
    "webhooks:read",  # webhook endpoints, deliveries, attempts, inbound hooks
    "webhooks:write",  # create / change / delete them, resend a delivery
    "metrics",  # /metrics (counts of every tenant: an operator's view)
    "packs:read",  # task packs: list, show, download approved versions (workers that load packs)
    "packs:write",  # task packs: upload
    "packs:approve",  # task packs: approve, reject, deprecate, archive; download any version to review it
    "packs:simulate",  # task packs: download versions awaiting approval (remote workers that simulate them)
    "admin",
)

_KEY_RE: Final = re.compile(r"^je_([0-9a-f]{12})_([A-Za-z0-9_\-]{20,100})$")


def new_key() -> tuple[str, str]:
    """A fresh (key id, full key text)."""
    key_id = os.urandom(6).hex()
    secret = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    return key_id, f"je_{key_id}_{secret}"


_SESSION_RE: Final = re.compile(r"js_[A-Za-z0-9_\-]{43}")


def new_session_token() -> str:
    """A dashboard session's token: ``js_`` and 32 random bytes (base64url). Never an API key: the API
    refuses it as one."""
    return "js_" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def is_session_token(text: str) -> bool:
    return _SESSION_RE.fullmatch(text) is not None


def key_id_of(text: str) -> str | None:
    """The id of a well-formed key, None for anything else (never raises on what a client sends)."""
    match = _KEY_RE.match(text)
    return match.group(1) if match else None


def hash_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def key_matches(text: str, secret_hash: str) -> bool:
    return hmac.compare_digest(hash_key(text), secret_hash)


def check_scopes(scopes: object) -> tuple[str, ...]:
    """Validate a list of scopes; returns them sorted and unique. Raises ValueError naming a bad one."""
    if isinstance(scopes, str) or not isinstance(scopes, list | tuple | set | frozenset):
        raise ValueError("scopes must be a list")
    out = set()
    for s in scopes:
        if s not in SCOPES:
            raise ValueError(f"unknown scope {s!r} (known: {', '.join(SCOPES)})")
        out.add(s)
    if not out:
        raise ValueError("give at least one scope")
    return tuple(sorted(out))


def allows(scopes: tuple[str, ...] | frozenset[str], needed: str) -> bool:
    return "admin" in scopes or needed in scopes
