"""Failure signatures: reads and marks, and what the failure path does with them
(:class:`~jobengine.engine.transitions.SignatureHooks`: ``prepare``, ``record``).

Every failed attempt (a task's exception, a lease that expired) passes through the engine's failure path;
there it is fingerprinted (``core.signatures``) and, after the store recorded the failure, upserted per
tenant. A signature marked non-retryable turns a failure that would retry into ``dead`` at once; which
signatures are marked is cached for ``signature_cache_seconds`` (a mark made in this process applies at
once, one made in another within that time). Usage::

    for s in await engine.signatures.list(SignatureFilter(tenant="acme")):
        print(s.occurrences, s.error_type, s.message, s.frames)
    await engine.signatures.update(key, tenant="acme", non_retryable=True, actor="alice")
"""

from __future__ import annotations

import builtins
import logging
import os
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from jobengine.core import signatures as sg
from jobengine.core.clock import Clock
from jobengine.core.ids import IdKind, JobId
from jobengine.core.models import Changed, FailOutcome, Failure
from jobengine.core.schedules import audit_event, check_actor
from jobengine.core.signatures import Fingerprint, Signature, SignatureFilter, SignatureHit, SignatureStatus
from jobengine.core.states import JobState
from jobengine.errors import InvalidSchedule, NotFound
from jobengine.ports.ids import resolve_id
from jobengine.ports.schedules import SchedulingStore
from jobengine.ports.store import Store
from jobengine.scheduler.schedules import Published

log = logging.getLogger("jobengine.signatures")

#: Frames under these paths are not the task's own code: jobengine itself and the standard library.
EXCLUDED_FRAMES: Final = tuple(
    dict.fromkeys(
        p
        for p in (
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # the jobengine package
            sysconfig.get_paths().get("stdlib", "") + os.sep,
            sysconfig.get_paths().get("platstdlib", "") + os.sep,
        )
        if p != os.sep
    )
)


class Signatures:
    """The failure signatures of one engine's store. ``cache_seconds``: how long the set of non-retryable
    signatures read from the store is used."""

    def __init__(
        self,
        store: SchedulingStore,
        *,
        jobs: Store,
        clock: Clock,
        published: Published,
        cache_seconds: float,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._clock = clock
        self._published = published
        self._cache_seconds = cache_seconds
        #: (tenant, key) of non-retryable signatures, and when they were read.
        self._non_retryable: set[tuple[str, str]] = set()
        self._non_retryable_keys: frozenset[str] = frozenset()
        self._non_retryable_at = float("-inf")

    async def list(self, filter: SignatureFilter | None = None) -> builtins.list[Signature]:
        """Most recently seen first."""
        return await self._store.list_signatures(filter or SignatureFilter())

    async def get(self, key: str, *, tenant: str = "default") -> Signature:
        """The signature ``key`` names, whole or by a unique prefix (:func:`~jobengine.ports.ids.resolve_id`)."""
        found = await self._store.get_signature(tenant, await resolve_id(self._jobs, IdKind.SIGNATURE, key, tenant))
        if found is None:
            raise NotFound("signature", key)
        return found

    async def update(
        self,
        key: str,
        *,
        tenant: str = "default",
        status: SignatureStatus | str | None = None,
        non_retryable: bool | None = None,
        actor: str = "system",
    ) -> Signature:
        """Set a signature's status (active / resolved / suppressed) and whether its failures may retry."""
        check_actor(actor)
        if status is None and non_retryable is None:
            raise InvalidSchedule("status", "give a status or non_retryable")
        try:
            new_status = SignatureStatus(status) if status is not None else None
        except ValueError:
            known = ", ".join(s.value for s in SignatureStatus)
            raise InvalidSchedule("status", f"{status!r} is not one of {known}") from None
        if non_retryable is not None and not isinstance(non_retryable, bool):
            raise InvalidSchedule("non_retryable", "must be true or false")
        key = await resolve_id(self._jobs, IdKind.SIGNATURE, key, tenant)
        data = {"key": key, "status": new_status.value if new_status else None, "non_retryable": non_retryable}
        event = audit_event(sg.SIGNATURE_UPDATED, tenant, actor, data)
        signature, events = await self._store.update_signature(
            tenant, key, new_status, non_retryable, self._clock.now(), event
        )
        self._published(events)
        self._non_retryable_at = float("-inf")  # re-read the marks at the next failure
        return signature

    # -- the hooks of the failure path --------------------------------------------------------------
    async def prepare(self, failures: Sequence[Failure]) -> tuple[builtins.list[Failure], dict[JobId, Fingerprint]]:
        """Fingerprint the failures (not cancellations); those that would retry with a non-retryable
        signature (of their tenant) go to dead instead. Returns the failures to apply and the prints to
        :meth:`record` once the store applied them."""
        prints = {
            f.job_id: sg.fingerprint(f.error.type, f.error.message, f.error.traceback, EXCLUDED_FRAMES)
            for f in failures
            if f.outcome is not FailOutcome.CANCELLED
        }
        if not prints:
            return list(failures), prints
        return await self._apply_policy(failures, prints), prints

    async def record(self, prints: Mapping[JobId, Fingerprint], changed: Changed) -> None:
        """Count the failures the store applied (a fenced-out report is not counted). Best effort."""
        if not prints:
            return
        now = self._clock.now()
        hits = [
            SignatureHit(job.tenant, prints[job.id], job.id, job.task, now)
            for job in changed.jobs
            if job.id in prints and job.state in (JobState.FAILED, JobState.DEAD)
        ]
        if not hits:
            return
        try:
            await self._store.record_signatures(hits, now)
        except Exception as exc:
            log.warning("failure signatures: could not record %d occurrence(s) (%s)", len(hits), exc)

    async def _apply_policy(
        self, failures: Sequence[Failure], prints: Mapping[JobId, Fingerprint]
    ) -> builtins.list[Failure]:
        now = self._clock.now()
        if now - self._non_retryable_at > self._cache_seconds:
            try:
                self._non_retryable = await self._store.non_retryable_signatures()
                self._non_retryable_keys = frozenset(k for _, k in self._non_retryable)
                self._non_retryable_at = now
            except Exception as exc:
                log.warning("could not read the non-retryable signatures (%s); using the last known", exc)
        marked = self._non_retryable_keys
        suspects = [
            f
            for f in failures
            if f.outcome is FailOutcome.RETRY and f.job_id in prints and prints[f.job_id].key in marked
        ]
        if not suspects:
            return list(failures)
        # The key is marked in some tenant: read the jobs to learn theirs (rare, so not on every failure).
        tenants = {j.id: j.tenant for j in await self._jobs.get_jobs([f.job_id for f in suspects])}
        dead = {f.job_id for f in suspects if (tenants.get(f.job_id), prints[f.job_id].key) in self._non_retryable}
        return [replace(f, outcome=FailOutcome.DEAD, retry_at=None) if f.job_id in dead else f for f in failures]
