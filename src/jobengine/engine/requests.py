"""Idempotency records of the HTTP API (``engine.requests``): the first answer to a POST that carried an
``Idempotency-Key`` header, kept per tenant so that a retry gets the same answer."""

from __future__ import annotations

from jobengine.core.clock import Clock
from jobengine.ports.auth import IdempotencyClaim, IdempotencyStore

#: A request holding an idempotency key longer than this is presumed dead: a retry may take the key over.
IDEMPOTENCY_LOCK_SECONDS = 60.0


class Requests:
    """Claim a request's idempotency key, then finish it with the answer or release it on failure.

    Usage::

        claim = await engine.requests.claim("acme", key, fingerprint)
        ...  # answer the request once, when the claim is new
        await engine.requests.finish("acme", key, 201, "application/json", body)
    """

    def __init__(self, store: IdempotencyStore, clock: Clock, *, ttl: float) -> None:
        self._store = store
        self._clock = clock
        self._ttl = ttl

    async def claim(self, tenant: str, key: str, fingerprint: str) -> IdempotencyClaim:
        """Take ``key`` for a request with ``fingerprint``, or learn the stored answer / the conflict."""
        now = self._clock.now()
        return await self._store.claim_idempotency_key(
            tenant, key, fingerprint, now, IDEMPOTENCY_LOCK_SECONDS, self._ttl
        )

    async def finish(self, tenant: str, key: str, status: int, content_type: str, body: bytes) -> None:
        """Keep the answer of the request that holds ``key``, for the retries that follow."""
        await self._store.finish_idempotency_key(tenant, key, status, content_type, body)

    async def release(self, tenant: str, key: str) -> None:
        """Give ``key`` up without an answer (the request failed): a retry runs it again."""
        await self._store.release_idempotency_key(tenant, key)

    async def prune(self, limit: int = 10_000) -> int:
        """Delete expired records; returns how many."""
        return await self._store.prune_idempotency_keys(self._clock.now(), limit)
