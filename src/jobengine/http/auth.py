"""API keys on requests: ``Authorization: Bearer <key>`` (or ``X-API-Key: <key>``) names a tenant and its
scopes. A missing, unknown or revoked key is 401; a key without the scope a route needs is 403.

Resolved keys are cached for ``api_key_cache_seconds`` (a revoke through this process's engine applies at
once; one made by another process within that time), so a request costs no store read in the common case.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers

from jobengine.core.keys import allows
from jobengine.engine import Engine
from jobengine.http.context import context
from jobengine.http.problems import ProblemError

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="jobengine"'}
_CACHE_MAX = 10_000  # entries; unknown keys are cached too, so garbage cannot grow it without bound

bearer_scheme = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer je_...`")
api_key_scheme = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key, as a header")


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str
    tenant: str
    scopes: tuple[str, ...]

    def allows(self, scope: str) -> bool:
        return allows(self.scopes, scope)


def credentials_of(headers: Headers) -> str | None:
    """The key a request carries, or None."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


class Authenticator:
    def __init__(self, engine: Engine, cache_seconds: float) -> None:
        self._engine = engine
        self._ttl = cache_seconds
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    async def resolve(self, text: str) -> Principal | None:
        """The principal of key ``text``, or None if it is not an active key."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        key = await self._engine.keys.authenticate(text)
        principal = Principal(key.id, key.tenant, key.scopes) if key is not None else None
        if self._ttl > 0:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[digest] = (now + self._ttl, principal)
        return principal

    async def from_headers(self, headers: Headers) -> Principal | None:
        text = credentials_of(headers)
        return await self.resolve(text) if text else None

    def forget(self, key_id: str) -> None:
        """Drop cached entries of a key (after it was revoked here)."""
        for digest, (_, p) in list(self._cache.items()):
            if p is not None and p.key_id == key_id:
                del self._cache[digest]


def require(scope: str, *alternatives: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency: the request's principal, which must hold ``scope`` (or one of ``alternatives``)."""

    async def dependency(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
        api_key: Annotated[str | None, Depends(api_key_scheme)],
    ) -> Principal:
        text = bearer.credentials if bearer is not None else api_key
        if not text:
            raise ProblemError(401, "an API key is required (Authorization: Bearer <key>)", headers=_CHALLENGE)
        principal = await context(request).auth.resolve(text.strip())
        if principal is None:
            raise ProblemError(401, "the API key is unknown or revoked", headers=_CHALLENGE)
        if not any(principal.allows(s) for s in (scope, *alternatives)):
            also = "".join(f" (or {s!r})" for s in alternatives)
            raise ProblemError(403, f"the API key lacks the scope {scope!r}{also}", extra={"required_scope": scope})
        request.state.principal = principal
        return principal

    return dependency
