"""API keys and the dashboard sessions opened with them (``engine.keys``).

Keys are stored hashed (:mod:`jobengine.core.keys`); the key text is shown once, when it is created. A
session is a random token in the browser's cookie; the store keeps its sha256. Both are read from the store
on every check, so a revocation or a logout in any process applies at once.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence

from jobengine.core import keys as keymod
from jobengine.core.clock import Clock
from jobengine.core.ids import IdKind
from jobengine.core.models import check_name
from jobengine.errors import InvalidJob, NotFound
from jobengine.ports.auth import ApiKey, KeyStore, SessionRecord, SessionStore
from jobengine.ports.ids import IdIndex, resolve_id


class Keys:
    """Create, list, revoke and check API keys; open, read and end dashboard sessions.

    Usage::

        key, text = await engine.keys.create("acme", ["jobs:write"], "billing service")
        assert (await engine.keys.authenticate(text)) == key
    """

    def __init__(
        self, keys: KeyStore, sessions: SessionStore, clock: Clock, *, ids: IdIndex, session_seconds: float
    ) -> None:
        self._keys = keys
        self._ids = ids
        self._sessions = sessions
        self._clock = clock
        self._session_seconds = session_seconds
        self._revoked: builtins.list[Callable[[str], None]] = []

    # -- API keys -----------------------------------------------------------------------------------
    async def create(self, tenant: str, scopes: Sequence[str], name: str = "") -> tuple[ApiKey, str]:
        """Create a key; returns the stored key and the key text, which is shown once and never stored.
        Raises InvalidJob (field ``tenant`` / ``scopes`` / ``name``)."""
        check_name("tenant", tenant)
        try:
            checked = keymod.check_scopes(list(scopes))
        except ValueError as exc:
            raise InvalidJob("scopes", str(exc)) from None
        if len(name) > 200:
            raise InvalidJob("name", "must be at most 200 characters")
        key_id, text = keymod.new_key()
        key = ApiKey(key_id, tenant, name, checked, keymod.hash_key(text), self._clock.now())
        await self._keys.insert_api_key(key)
        return key, text

    async def list(self, tenant: str | None = None) -> builtins.list[ApiKey]:
        """Every key (of ``tenant`` when given), revoked ones included."""
        return await self._keys.list_api_keys(tenant)

    async def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent); caches of this process that registered with :meth:`on_revoked`
        forget it at once. ``key_id`` may be a unique prefix of the id (:func:`~jobengine.ports.ids.resolve_id`).
        Raises NotFound for an unknown id."""
        key_id = await resolve_id(self._ids, IdKind.KEY, key_id)
        key = await self._keys.revoke_api_key(key_id, self._clock.now())
        if key is None:
            raise NotFound("api key", key_id)
        for forget in self._revoked:
            forget(key_id)
        return key

    def on_revoked(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(key_id)`` whenever this process revokes a key (a key cache drops it)."""
        self._revoked.append(fn)

    async def authenticate(self, text: str) -> ApiKey | None:
        """The active key ``text`` is, or None (malformed, unknown, wrong secret or revoked)."""
        key_id = keymod.key_id_of(text)
        if key_id is None:
            return None
        key = await self._keys.get_api_key(key_id)
        if key is None or not key.active or not keymod.key_matches(text, key.secret_hash):
            return None
        return key

    async def any_active(self) -> bool:
        """Whether any tenant has a key that is not revoked (a server off loopback requires one)."""
        return any(k.active for k in await self.list())

    # -- dashboard sessions -------------------------------------------------------------------------
    async def open_session(self, key: ApiKey) -> tuple[SessionRecord, str]:
        """A dashboard session of ``key`` (an active key) for ``dashboard_session_seconds``: the stored record
        and the token for the browser's cookie (random, shown once; the store keeps its sha256 only)."""
        token = keymod.new_session_token()
        now = self._clock.now()
        record = SessionRecord(keymod.hash_key(token), key.id, key.tenant, now, now + self._session_seconds)
        await self._sessions.insert_session(record)
        return record, token

    async def session(self, token: str) -> tuple[SessionRecord, ApiKey] | None:
        """The session of ``token`` with its key, or None: malformed, unknown, ended (logout, its key revoked)
        or expired, or its key is no longer active. Read from the store on every call, so a logout or a
        revocation in any process applies at once."""
        if not keymod.is_session_token(token):
            return None
        record = await self._sessions.get_session(keymod.hash_key(token))
        if record is None or not record.active(self._clock.now()):
            return None
        key = await self._keys.get_api_key(record.key_id)
        if key is None or not key.active:
            return None
        return record, key

    async def end_session(self, token: str) -> None:
        """End the session of ``token`` (logout); nothing for a token that names none."""
        if keymod.is_session_token(token):
            await self._sessions.end_session(keymod.hash_key(token), self._clock.now())

    async def prune_sessions(self, limit: int = 10_000) -> int:
        """Delete sessions that ended or expired; returns how many."""
        return await self._sessions.prune_sessions(self._clock.now(), limit)
