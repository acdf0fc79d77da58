"""API keys, dashboard sessions and HTTP idempotency records (optional ports, next to the Store of the same
backend).

Keys are stored hashed: the store keeps the key id (public, the ``je_<id>_`` prefix of the key) and the
sha256 of the whole key, never the secret itself (see :mod:`jobengine.core.keys`). Idempotency records
remember the first answer to a POST that carried an ``Idempotency-Key`` header, per tenant, so a retry
gets the same answer and a concurrent duplicate is refused while the first is still in flight. A dashboard
session is a random token in the browser's cookie: the store keeps its sha256, the key it was opened with,
and when it expires or ended; revoking the key ends its sessions in the same transaction.

All are ``runtime_checkable``: the engine asks ``isinstance(store, KeyStore)`` the way it asks for the
other optional ports (transactional enqueue, watermarks), and refuses with ConfigError when a store has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key. ``secret_hash`` is the hex sha256 of the full key text; the key itself is never kept."""

    id: str
    tenant: str
    name: str
    scopes: tuple[str, ...]
    secret_hash: str
    created_at: float
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A dashboard login, kept server-side. ``token_hash`` is the hex sha256 of the token in the browser's
    cookie (the token itself is never stored). It ends at logout, when its key is revoked, or at
    ``expires_at``."""

    token_hash: str
    key_id: str
    tenant: str
    created_at: float
    expires_at: float
    ended_at: float | None = None

    def active(self, now: float) -> bool:
        return self.ended_at is None and now < self.expires_at


@runtime_checkable
class KeyStore(Protocol):
    async def insert_api_key(self, key: ApiKey) -> None:
        """Store a new key. Raises StoreError if the id is taken (ids are random: never in practice)."""
        ...

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        """The key with this id, revoked or not; None if there is none."""
        ...

    async def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant``), oldest first."""
        ...

    async def revoke_api_key(self, key_id: str, now: float) -> ApiKey | None:
        """Mark the key revoked (idempotent: a second revoke keeps the first time) and end its dashboard
        sessions, in one transaction. None if unknown."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    async def insert_session(self, session: SessionRecord) -> None: ...

    async def get_session(self, token_hash: str) -> SessionRecord | None:
        """The session, ended or not; None if there is none (or it was pruned)."""
        ...

    async def end_session(self, token_hash: str, now: float) -> None:
        """Mark it ended (idempotent: a second end keeps the first time)."""
        ...

    async def prune_sessions(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` sessions that ended or expired by ``now``; return how many."""
        ...


class ClaimState(StrEnum):
    CLAIMED = "claimed"  # the caller owns the key now: run the request, then finish or release it
    IN_FLIGHT = "in_flight"  # another request with this key is running
    DONE = "done"  # the request already ran; ``record`` holds its answer


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    tenant: str
    key: str
    fingerprint: str  # sha256 of method, path, query and body: "the same request"
    created_at: float
    expires_at: float
    locked_until: float | None = None  # set while in flight; a crashed owner's claim lapses at this time
    status: int | None = None
    content_type: str | None = None
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    state: ClaimState
    record: IdempotencyRecord


@runtime_checkable
class IdempotencyStore(Protocol):
    async def claim_idempotency_key(
        self, tenant: str, key: str, fingerprint: str, now: float, lock_seconds: float, ttl: float
    ) -> IdempotencyClaim:
        """Atomically: no record (or an expired one) -> insert one in flight, CLAIMED; a record in flight
        whose lock lapsed (its owner died) -> take it over, CLAIMED; in flight -> IN_FLIGHT; finished ->
        DONE. The caller compares fingerprints (the record returned is the stored one)."""
        ...

    async def finish_idempotency_key(self, tenant: str, key: str, status: int, content_type: str, body: bytes) -> None:
        """Store the answer of the claimed request; later claims get DONE with it."""
        ...

    async def release_idempotency_key(self, tenant: str, key: str) -> None:
        """Forget a claim whose request was refused or failed, so that a retry runs afresh."""
        ...

    async def prune_idempotency_keys(self, now: float, limit: int) -> int:
        """Delete up to ``limit`` expired records; return how many."""
        ...


__all__: Sequence[str] = (
    "ApiKey",
    "ClaimState",
    "IdempotencyClaim",
    "IdempotencyRecord",
    "IdempotencyStore",
    "KeyStore",
    "SessionRecord",
    "SessionStore",
)
