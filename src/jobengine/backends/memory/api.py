"""The optional ports of the HTTP layer (keys, dashboard sessions, idempotency records, queue settings,
filtered claims) for the in-memory store. Mixed into :class:`MemoryStore`; its state is created on first use,
so the store's own constructor is left alone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from jobengine.core import events as ev
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Job, NewEvent
from jobengine.core.states import JobState
from jobengine.errors import StoreError
from jobengine.ports.auth import ApiKey, ClaimState, IdempotencyClaim, IdempotencyRecord, SessionRecord
from jobengine.ports.queues import QueueSettings


class _State(Protocol):
    """What this mixin uses of MemoryStore (a Protocol, so mypy checks the mixin against it)."""

    _jobs: dict[JobId, Job]
    _dependents: dict[JobId, set[JobId]]
    _idem: dict[tuple[str, str], JobId]
    _events: list[Event]
    _lock: asyncio.Lock

    def _append(self, events: Iterable[NewEvent], now: float) -> list[Event]: ...


@dataclass
class _ApiState:
    keys: dict[str, ApiKey] = field(default_factory=dict)
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    idem: dict[tuple[str, str], IdempotencyRecord] = field(default_factory=dict)
    queues: dict[str, QueueSettings] = field(default_factory=dict)


class MemoryApiMixin:
    _api_state: _ApiState | None = None

    def _api(self) -> _ApiState:
        if self._api_state is None:
            self._api_state = _ApiState()
        return self._api_state

    # -- KeyStore -----------------------------------------------------------------------------------
    async def insert_api_key(self, key: ApiKey) -> None:
        keys = self._api().keys
        if key.id in keys:
            raise StoreError(f"api key id {key.id} is taken")
        keys[key.id] = key

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        return self._api().keys.get(key_id)

    async def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        keys = [k for k in self._api().keys.values() if tenant is None or k.tenant == tenant]
        return sorted(keys, key=lambda k: (k.created_at, k.id))

    async def revoke_api_key(self, key_id: str, now: float) -> ApiKey | None:
        keys = self._api().keys
        key = keys.get(key_id)
        if key is None:
            return None
        if key.revoked_at is None:
            key = keys[key_id] = replace(key, revoked_at=now)
        sessions = self._api().sessions
        for token_hash, session in list(sessions.items()):
            if session.key_id == key_id and session.ended_at is None:
                sessions[token_hash] = replace(session, ended_at=now)
        return key

    # -- SessionStore -------------------------------------------------------------------------------
    async def insert_session(self, session: SessionRecord) -> None:
        sessions = self._api().sessions
        if session.token_hash in sessions:
            raise StoreError("session token is taken")
        sessions[session.token_hash] = session

    async def get_session(self, token_hash: str) -> SessionRecord | None:
        return self._api().sessions.get(token_hash)

    async def end_session(self, token_hash: str, now: float) -> None:
        sessions = self._api().sessions
        session = sessions.get(token_hash)
        if session is not None and session.ended_at is None:
            sessions[token_hash] = replace(session, ended_at=now)

    async def prune_sessions(self, now: float, limit: int) -> int:
        sessions = self._api().sessions
        gone = [h for h, s in sessions.items() if s.expires_at <= now or (s.ended_at is not None and s.ended_at <= now)]
        for token_hash in gone[:limit]:
            del sessions[token_hash]
        return len(gone[:limit])

    # -- IdempotencyStore ---------------------------------------------------------------------------
    async def claim_idempotency_key(
        self, tenant: str, key: str, fingerprint: str, now: float, lock_seconds: float, ttl: float
    ) -> IdempotencyClaim:
        idem = self._api().idem
        rec = idem.get((tenant, key))
        if rec is None or rec.expires_at <= now:
            rec = IdempotencyRecord(tenant, key, fingerprint, now, now + ttl, now + lock_seconds)
            idem[(tenant, key)] = rec
            return IdempotencyClaim(ClaimState.CLAIMED, rec)
        if rec.status is not None:
            return IdempotencyClaim(ClaimState.DONE, rec)
        if rec.locked_until is not None and rec.locked_until <= now and rec.fingerprint == fingerprint:
            rec = idem[(tenant, key)] = replace(rec, locked_until=now + lock_seconds)
            return IdempotencyClaim(ClaimState.CLAIMED, rec)
        return IdempotencyClaim(ClaimState.IN_FLIGHT, rec)

    async def finish_idempotency_key(self, tenant: str, key: str, status: int, content_type: str, body: bytes) -> None:
        idem = self._api().idem
        rec = idem.get((tenant, key))
        if rec is not None:
            idem[(tenant, key)] = replace(rec, locked_until=None, status=status, content_type=content_type, body=body)

    async def release_idempotency_key(self, tenant: str, key: str) -> None:
        rec = self._api().idem.get((tenant, key))
        if rec is not None and rec.status is None:
            del self._api().idem[(tenant, key)]

    async def prune_idempotency_keys(self, now: float, limit: int) -> int:
        idem = self._api().idem
        expired = [k for k, r in idem.items() if r.expires_at <= now][:limit]
        for k in expired:
            del idem[k]
        return len(expired)

    # -- QueueSettingsStore -------------------------------------------------------------------------
    async def list_queue_settings(self) -> list[QueueSettings]:
        return [self._api().queues[q] for q in sorted(self._api().queues)]

    async def set_queue_settings(self, settings: QueueSettings) -> QueueSettings:
        self._api().queues[settings.queue] = settings
        return settings

    async def running_counts(self: _State, queues: Sequence[str]) -> dict[str, int]:
        qs = set(queues)
        counts: dict[str, int] = {}
        for job in self._jobs.values():
            if job.state is JobState.RUNNING and job.queue in qs:
                counts[job.queue] = counts.get(job.queue, 0) + 1
        return counts

    # -- EventLogStore (no pruning: list_events finds an event by its position in the list) ----------
    async def event_bounds(self: _State) -> tuple[int, int]:
        return (self._events[0].id, self._events[-1].id) if self._events else (0, 0)

    # -- DeadLetterStore ----------------------------------------------------------------------------
    async def purge_dead_jobs(
        self: _State,
        now: float,
        limit: int,
        *,
        tenant: str | None = None,
        ids: Sequence[JobId] | None = None,
        queue: str | None = None,
    ) -> list[Event]:
        async with self._lock:
            wanted = set(ids) if ids is not None else None
            doomed = [
                j
                for j in sorted(self._jobs.values(), key=lambda j: j.id)
                if j.state is JobState.DEAD
                and (tenant is None or j.tenant == tenant)
                and (wanted is None or j.id in wanted)
                and (queue is None or j.queue == queue)
            ][: max(0, limit)]
            for job in doomed:  # as prune_jobs deletes
                del self._jobs[job.id]
                if job.idempotency_key is not None:
                    self._idem.pop((job.tenant, job.idempotency_key), None)
                for d in job.depends_on:
                    self._dependents.get(d, set()).discard(job.id)
            return self._append([ev.job_event(ev.DELETED, j) for j in doomed], now)
