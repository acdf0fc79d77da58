"""The part of the Engine facade that the HTTP API, the CLI's ``keys`` commands and remote workers use:
API keys, idempotency records, queue control, tenant-scoped job actions, claims by task, the event feed,
readiness. Mixed into :class:`~jobengine.engine.Engine` (kept apart only to keep each module small);
callers see one facade.

Each method needs an optional port of the store (``ports/auth.py``, ``ports/queues.py``,
``ports/deadletter.py``, ``ports/eventlog.py``); a store without it raises ConfigError naming the feature.
Every method that takes a ``tenant`` acts only on that tenant's jobs: another tenant's job is NotFound,
exactly like one that does not exist.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from jobengine.core import keys as keymod
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Job, JobFilter, NewJob, check_name
from jobengine.core.states import JobState
from jobengine.errors import ConfigError, IllegalState, InvalidJob, NotFound
from jobengine.ports.eventlog import EventLogStore, EventPruneStore, SettlingEventLog
from jobengine.ports.queues import QueueSettings, QueueSettingsStore
from jobengine.ports.store import supports

if TYPE_CHECKING:
    from jobengine.bus import EventBus
    from jobengine.core.clock import Clock
    from jobengine.feed import EventFeed, EventRead
    from jobengine.ports.auth import ApiKey, IdempotencyClaim, IdempotencyStore, KeyStore, SessionRecord, SessionStore
    from jobengine.ports.deadletter import DeadLetterStore
    from jobengine.ports.notifier import Notifier
    from jobengine.ports.store import Store
    from jobengine.ports.watermarks import Watermark
    from jobengine.settings import Settings

#: How long a process trusts the queue settings it read before reading them again (pause, resume and
#: limits changed in another process apply within this time; in this process, at once).
QUEUE_SETTINGS_TTL = 1.0
#: A request holding an idempotency key longer than this is presumed dead: a retry may take the key over.
IDEMPOTENCY_LOCK_SECONDS = 60.0

HealthCheck = Callable[[], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as a tenant sees it: its jobs by state (only the tenant's) and the shared settings."""

    name: str
    counts: Mapping[str, int]
    paused: bool = False
    concurrency: int | None = None


@dataclass
class _ApiState:
    queues: dict[str, QueueSettings] = field(default_factory=dict)
    queues_read_at: float = -1e18
    checks: dict[str, HealthCheck] = field(default_factory=dict)
    revoked: list[Callable[[str], None]] = field(default_factory=list)


class ApiFacade:
    # Provided by Engine.
    store: Store
    settings: Settings
    clock: Clock
    bus: EventBus
    _api_state: _ApiState | None = None

    if TYPE_CHECKING:

        def _published(self, events: Sequence[Event]) -> None: ...

        def notifier(self) -> Notifier: ...

        async def enqueue_many(
            self,
            jobs: Sequence[NewJob],
            *,
            connection: object | None = None,
            watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
        ) -> list[Job]: ...

        async def get_job(self, job_id: str, tenant: str | None = None) -> Job: ...

        async def list_jobs(self, filter: JobFilter | None = None) -> list[Job]: ...

        async def count_jobs(self, tenant: str | None = None) -> dict[tuple[str, JobState], int]: ...

        async def events(
            self, after_id: int = 0, limit: int = 100, job_id: str | None = None, tenant: str | None = None
        ) -> list[Event]: ...

    def _api(self) -> _ApiState:
        if self._api_state is None:
            self._api_state = _ApiState()
        return self._api_state

    # One accessor per optional port: mypy cannot narrow to a Protocol passed as a value.
    def _keys(self) -> KeyStore:
        from jobengine.ports.auth import KeyStore

        if not isinstance(self.store, KeyStore):
            raise ConfigError("database: this store does not keep API keys")
        return self.store

    def _idempotency(self) -> IdempotencyStore:
        from jobengine.ports.auth import IdempotencyStore

        if not isinstance(self.store, IdempotencyStore):
            raise ConfigError("database: this store does not keep idempotency records")
        return self.store

    def _queue_store(self) -> QueueSettingsStore:
        if not isinstance(self.store, QueueSettingsStore):
            raise ConfigError("database: this store does not keep queue settings")
        return self.store

    def _dead_letter(self) -> DeadLetterStore:
        from jobengine.ports.deadletter import DeadLetterStore

        if not isinstance(self.store, DeadLetterStore):
            raise ConfigError("database: this store cannot purge the dead-letter")
        return self.store

    # -- API keys -----------------------------------------------------------------------------------
    async def create_api_key(self, tenant: str, scopes: Sequence[str], name: str = "") -> tuple[ApiKey, str]:
        """Create a key; returns the stored key and the key text, which is shown once and never stored.
        Raises InvalidJob (field ``tenant`` / ``scopes`` / ``name``)."""
        from jobengine.ports.auth import ApiKey

        check_name("tenant", tenant)
        try:
            checked = keymod.check_scopes(list(scopes))
        except ValueError as exc:
            raise InvalidJob("scopes", str(exc)) from None
        if len(name) > 200:
            raise InvalidJob("name", "must be at most 200 characters")
        key_id, text = keymod.new_key()
        key = ApiKey(key_id, tenant, name, checked, keymod.hash_key(text), self.clock.now())
        await self._keys().insert_api_key(key)
        return key, text

    async def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        return await self._keys().list_api_keys(tenant)

    async def revoke_api_key(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent); caches of this process that registered with :meth:`on_key_revoked`
        forget it at once. Raises NotFound for an unknown id."""
        key = await self._keys().revoke_api_key(key_id, self.clock.now())
        if key is None:
            raise NotFound("api key", key_id)
        for forget in self._api().revoked:
            forget(key_id)
        return key

    def on_key_revoked(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(key_id)`` whenever this engine revokes a key (a key cache drops it)."""
        self._api().revoked.append(fn)

    async def authenticate(self, text: str) -> ApiKey | None:
        """The active key ``text`` is, or None (malformed, unknown, wrong secret or revoked)."""
        key_id = keymod.key_id_of(text)
        if key_id is None:
            return None
        key = await self._keys().get_api_key(key_id)
        if key is None or not key.active or not keymod.key_matches(text, key.secret_hash):
            return None
        return key

    async def has_active_api_keys(self) -> bool:
        return any(k.active for k in await self.list_api_keys())

    # -- dashboard sessions -------------------------------------------------------------------------
    def _sessions(self) -> SessionStore:
        from jobengine.ports.auth import SessionStore

        if not isinstance(self.store, SessionStore):
            raise ConfigError("database: this store does not keep dashboard sessions")
        return self.store

    async def open_session(self, key: ApiKey) -> tuple[SessionRecord, str]:
        """A dashboard session of ``key`` (an active key) for ``dashboard_session_seconds``: the stored record
        and the token for the browser's cookie (random, shown once; the store keeps its sha256 only)."""
        from jobengine.ports.auth import SessionRecord

        token = keymod.new_session_token()
        now = self.clock.now()
        record = SessionRecord(
            keymod.hash_key(token), key.id, key.tenant, now, now + self.settings.dashboard_session_seconds
        )
        await self._sessions().insert_session(record)
        return record, token

    async def session(self, token: str) -> tuple[SessionRecord, ApiKey] | None:
        """The session of ``token`` with its key, or None: malformed, unknown, ended (logout, its key revoked)
        or expired, or its key is no longer active. Read from the store on every call, so a logout or a
        revocation in any process applies at once."""
        if not keymod.is_session_token(token):
            return None
        record = await self._sessions().get_session(keymod.hash_key(token))
        if record is None or not record.active(self.clock.now()):
            return None
        key = await self._keys().get_api_key(record.key_id)
        if key is None or not key.active:
            return None
        return record, key

    async def end_session(self, token: str) -> None:
        """End the session of ``token`` (logout); nothing for a token that names none."""
        if keymod.is_session_token(token):
            await self._sessions().end_session(keymod.hash_key(token), self.clock.now())

    async def prune_sessions(self, limit: int = 10_000) -> int:
        """Delete sessions that ended or expired; 0 for a store without sessions."""
        from jobengine.ports.auth import SessionStore

        if not isinstance(self.store, SessionStore):
            return 0
        return await self.store.prune_sessions(self.clock.now(), limit)

    # -- idempotency records ------------------------------------------------------------------------
    async def claim_request(self, tenant: str, key: str, fingerprint: str) -> IdempotencyClaim:
        store = self._idempotency()
        now = self.clock.now()
        ttl = self.settings.idempotency_ttl
        return await store.claim_idempotency_key(tenant, key, fingerprint, now, IDEMPOTENCY_LOCK_SECONDS, ttl)

    async def finish_request(self, tenant: str, key: str, status: int, content_type: str, body: bytes) -> None:
        await self._idempotency().finish_idempotency_key(tenant, key, status, content_type, body)

    async def release_request(self, tenant: str, key: str) -> None:
        await self._idempotency().release_idempotency_key(tenant, key)

    async def prune_requests(self, limit: int = 10_000) -> int:
        from jobengine.ports.auth import IdempotencyStore

        if not isinstance(self.store, IdempotencyStore):
            return 0
        return await self.store.prune_idempotency_keys(self.clock.now(), limit)

    # -- queues -------------------------------------------------------------------------------------
    async def queue_settings(self, *, fresh: bool = False) -> dict[str, QueueSettings]:
        """Settings by queue name, cached for QUEUE_SETTINGS_TTL seconds (``fresh`` reads them now)."""
        if not supports(self.store, QueueSettingsStore):  # every claim reads the settings: asked once
            return {}
        state = self._api()
        if fresh or time.monotonic() - state.queues_read_at > QUEUE_SETTINGS_TTL:
            state.queues = {s.queue: s for s in await cast(QueueSettingsStore, self.store).list_queue_settings()}
            state.queues_read_at = time.monotonic()
        return state.queues

    async def update_queue(
        self, queue: str, *, paused: bool | None = None, concurrency: int | None = None, unlimited: bool = False
    ) -> QueueSettings:
        """Pause / resume a queue or set its concurrency limit (``unlimited`` removes it). Queues are shared
        by every tenant: this is an operator's action. Raises InvalidJob for a bad name or limit."""
        check_name("queue", queue)
        if concurrency is not None and not (1 <= concurrency <= 1_000_000):
            raise InvalidJob("concurrency", "must be an integer from 1 to 1000000")
        store = self._queue_store()
        current = (await self.queue_settings(fresh=True)).get(queue) or QueueSettings(queue)
        new = QueueSettings(
            queue,
            current.paused if paused is None else paused,
            None if unlimited else (concurrency if concurrency is not None else current.concurrency),
            self.clock.now(),
        )
        await store.set_queue_settings(new)
        self._api().queues[queue] = new
        if not new.paused:
            self.notifier().notify()  # workers waiting on a paused queue may claim now
        return new

    async def queues(self, tenant: str) -> list[QueueInfo]:
        """Every queue that has jobs of ``tenant`` or settings, with the tenant's counts by state."""
        counts = await self.count_jobs(tenant)
        settings = await self.queue_settings(fresh=True)
        names = sorted({q for q, _ in counts} | set(settings))
        out = []
        for name in names:
            by_state = {s.value: counts.get((name, s), 0) for s in JobState}
            s = settings.get(name) or QueueSettings(name)
            out.append(QueueInfo(name, by_state, s.paused, s.concurrency))
        return out

    async def queue(self, name: str, tenant: str) -> QueueInfo:
        check_name("queue", name)
        for info in await self.queues(tenant):
            if info.name == name:
                return info
        return QueueInfo(name, {s.value: 0 for s in JobState})

    # -- tenant-scoped job actions ------------------------------------------------------------------
    async def get_jobs(self, ids: Sequence[str], tenant: str | None = None) -> list[Job]:
        """The jobs among ``ids`` that exist (and belong to ``tenant``), in the order asked for."""
        return await self.store.get_jobs([JobId(i) for i in ids], tenant) if ids else []

    async def enqueue_for(self, tenant: str, jobs: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        """Enqueue jobs of ``tenant`` (all or none); each with whether it was created (False: an existing
        job with the same idempotency key). A dependency on another tenant's job is UnknownDependency (the
        store refuses it, as for every enqueue)."""
        for job in jobs:
            if job.tenant != tenant:
                raise InvalidJob("tenant", "a job must belong to the caller's tenant")
        stored = await self.enqueue_many(jobs)
        return [(job, job.id == new.id) for job, new in zip(stored, jobs, strict=True)]

    async def replay(self, job_id: str, tenant: str | None = None) -> Job:
        """Queue a dead job again with a fresh attempt budget. IllegalState if it is not dead."""
        job = await self.get_job(job_id, tenant)
        if job.state is not JobState.DEAD:
            raise IllegalState(f"job {job_id} is {job.state.value}; only a dead job can be replayed")
        changed = await self.store.retry_jobs([job.id], self.clock.now(), tenant)
        self._published(changed.events)
        self.notifier().notify()
        return await self.get_job(job_id, tenant)

    async def replay_dead(
        self, tenant: str, *, ids: Sequence[str] | None = None, queue: str | None = None, limit: int = 1000
    ) -> list[Job]:
        """Queue dead jobs of ``tenant`` again (those among ``ids`` / of ``queue``; oldest first, at most
        ``limit``). Ids that are not dead jobs of the tenant are left out."""
        if ids is not None:
            dead = [j for j in await self.store.get_jobs([JobId(i) for i in ids], tenant) if j.state is JobState.DEAD]
            dead = [j for j in dead if queue is None or j.queue == queue][:limit]
        else:
            dead = await self.list_jobs(JobFilter(tenant=tenant, states=(JobState.DEAD,), queue=queue, limit=limit))
        if not dead:
            return []
        changed = await self.store.retry_jobs([j.id for j in dead], self.clock.now(), tenant)
        self._published(changed.events)
        self.notifier().notify()
        return changed.jobs

    async def purge_dead(
        self, tenant: str, *, ids: Sequence[str] | None = None, queue: str | None = None, limit: int = 1000
    ) -> int:
        """Delete dead jobs of ``tenant`` now (with a ``job.deleted`` event each); returns how many."""
        store = self._dead_letter()
        job_ids = [JobId(i) for i in ids] if ids is not None else None
        events = await store.purge_dead_jobs(self.clock.now(), limit, tenant=tenant, ids=job_ids, queue=queue)
        self._published(events)
        return len(events)

    # -- the event feed -----------------------------------------------------------------------------
    def event_feed(
        self,
        *,
        after_id: int = 0,
        tenant: str | None = None,
        job_id: str | None = None,
        match: Callable[[Event], bool] | None = None,
        buffer: int | None = None,
        poll_interval: float | None = None,
    ) -> EventFeed:
        """Follow the event log after ``after_id`` (see :mod:`jobengine.feed`); close() it when done."""
        from jobengine.feed import EventFeed

        async def read(after: int, limit: int) -> EventRead:
            return await self.read_settled_events(after, limit, job_id=job_id, tenant=tenant)

        bounds = self.store.event_bounds if isinstance(self.store, EventLogStore) else None
        return EventFeed(
            read,
            self.bus,
            after_id=after_id,
            tenant=tenant,
            job_id=job_id,
            match=match,
            bounds=bounds,
            buffer=buffer if buffer is not None else self.settings.sse_buffer,
            poll_interval=poll_interval if poll_interval is not None else self.settings.sse_poll_interval,
        )

    async def read_settled_events(
        self, after_id: int, limit: int, *, job_id: str | None = None, tenant: str | None = None
    ) -> EventRead:
        """Events past ``after_id`` (of one job / one tenant when given), oldest first, at most ``limit``, none
        past the settled bound; the result's ``cursor`` is where the next read starts and never passes an id
        whose transaction may still commit (see :class:`~jobengine.feed.EventRead`). Every reader that moves
        a cursor along the log reads through this, so none skips an event that commits late. On a store
        that numbers events in commit order (SQLite, memory) it is a plain read: every id is settled there.

        Usage::

            read = await engine.read_settled_events(cursor, 100, tenant="acme")
            handle(read.events)
            cursor = read.cursor  # read.complete: nothing more to read now
        """
        from jobengine.feed import cut_at_settled

        bound = None
        if isinstance(self.store, SettlingEventLog):
            # First the bound, then the read: every id the bound settles was committed before the read began.
            bound = await self.settled_event_id(after_id)
        events = await self.events(after_id, limit, job_id, tenant)
        return cut_at_settled(after_id, limit, events, bound)

    async def settled_event_id(self, after_id: int) -> tuple[int, int]:
        """``(settled, newest)`` past ``after_id`` (see :class:`~jobengine.ports.eventlog.SettlingEventLog`):
        a follower of the log reads no further than ``settled``. A store that numbers its events in commit
        order has every id settled: ``(newest, newest)``."""
        if isinstance(self.store, SettlingEventLog):
            return await self.store.settled_event_id(after_id, self.clock.now(), self.settings.event_settle_grace)
        newest = await self.newest_event_id()
        return newest, newest

    async def prune_events(self, limit: int = 10_000) -> int:
        """Delete events older than ``settings.event_retention`` seconds (0: keep them all)."""
        keep = self.settings.event_retention
        if keep <= 0 or not isinstance(self.store, EventPruneStore):
            return 0
        return await self.store.prune_events(self.clock.now() - keep, limit)

    async def newest_event_id(self) -> int:
        """The id of the newest event (0 for none): where a follower that wants only new events starts."""
        if isinstance(self.store, EventLogStore):
            return (await self.store.event_bounds())[1]
        newest = 0
        while batch := await self.store.list_events(newest, 10_000):  # a store without bounds: walk the log
            newest = batch[-1].id
        return newest

    # -- readiness ----------------------------------------------------------------------------------
    def add_health_check(self, name: str, check: HealthCheck) -> None:
        """Register a readiness check (a service of this process: runner, planner, a transport); it returns
        a short status text, or raises when the part is not ready."""
        self._api().checks[name] = check

    def remove_health_check(self, name: str) -> None:
        self._api().checks.pop(name, None)

    async def readiness(self, timeout: float = 2.0) -> dict[str, tuple[bool, str]]:
        """Every check's (ready, detail): the store (a read), each queue transport (planner, runner: one
        round trip each) and the checks services of this process registered."""
        results: dict[str, tuple[bool, str]] = {}

        async def run(name: str, check: HealthCheck) -> None:
            try:
                async with asyncio.timeout(timeout):
                    results[name] = (True, await check())
            except Exception as exc:
                results[name] = (False, f"{type(exc).__name__}: {exc}"[:300])

        async def store() -> str:
            await self.store.list_events(2**62, 1)  # an index probe: proves a connection and the schema
            return "ok"

        checks = {"store": store, **self._api().checks}
        transports = getattr(self, "transports", None)  # the queue transports (planner, runner), if any
        if transports is not None:

            async def each_transport() -> None:
                try:
                    async with asyncio.timeout(timeout):
                        for h in await transports.health():
                            detail = f"{h.transport}, {h.latency_ms:.1f} ms" + (f": {h.detail}" if h.detail else "")
                            results[f"transport:{h.queue}"] = (bool(h.ok), detail)
                except Exception as exc:
                    results["transport"] = (False, f"{type(exc).__name__}: {exc}"[:300])

            await each_transport()
        await asyncio.gather(*(run(n, c) for n, c in checks.items()))
        return dict(sorted(results.items()))
