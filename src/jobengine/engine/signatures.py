"""Failure signatures on the Engine facade, and what the failure path does with them.

Every failed attempt (a task's exception, a lease that expired) passes through ``Engine.fail_jobs``; there
it is fingerprinted (``core.signatures``) and, after the store recorded the failure, upserted per tenant.
A signature marked non-retryable turns a failure that would retry into ``dead`` at once; which signatures
are marked is cached for ``signature_cache_seconds`` (a mark made in this process applies at once, one
made in another within that time). Usage::

    for s in await engine.list_signatures(SignatureFilter(tenant="acme")):
        print(s.occurrences, s.error_type, s.message, s.frames)
    await engine.update_signature(key, tenant="acme", non_retryable=True, actor="alice")
"""

from __future__ import annotations

import logging
import os
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from jobengine.core.ids import JobId
from jobengine.core.models import Changed, FailOutcome, Failure
from jobengine.core.states import JobState
from jobengine.engine.scheduling import SchedulingBase
from jobengine.errors import InvalidSchedule, NotFound

if TYPE_CHECKING:
    from jobengine.core.signatures import Fingerprint, Signature, SignatureFilter, SignatureStatus

log = logging.getLogger("jobengine.signatures")

#: Frames under these paths are not the task's own code: jobengine itself and the standard library.
EXCLUDED_FRAMES: Final = tuple(
    dict.fromkeys(
        p
        for p in (
            os.path.dirname(os.path.abspath(__file__)) + os.sep,  # this module's package: jobengine
            sysconfig.get_paths().get("stdlib", "") + os.sep,
            sysconfig.get_paths().get("platstdlib", "") + os.sep,
        )
        if p != os.sep
    )
)


class SignatureFacade(SchedulingBase):
    async def list_signatures(self, filter: SignatureFilter | None = None) -> list[Signature]:
        """Most recently seen first."""
        from jobengine.core.signatures import SignatureFilter

        return await self._scheduling().list_signatures(filter or SignatureFilter())

    async def get_signature(self, key: str, *, tenant: str = "default") -> Signature:
        found = await self._scheduling().get_signature(tenant, key)
        if found is None:
            raise NotFound("signature", key)
        return found

    async def update_signature(
        self,
        key: str,
        *,
        tenant: str = "default",
        status: SignatureStatus | str | None = None,
        non_retryable: bool | None = None,
        actor: str = "system",
    ) -> Signature:
        """Set a signature's status (active / resolved / suppressed) and whether its failures may retry."""
        from jobengine.core import signatures as sg
        from jobengine.core.schedules import audit_event, check_actor
        from jobengine.core.signatures import SignatureStatus

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
        data = {"key": key, "status": new_status.value if new_status else None, "non_retryable": non_retryable}
        event = audit_event(sg.SIGNATURE_UPDATED, tenant, actor, data)
        signature, events = await self._scheduling().update_signature(
            tenant, key, new_status, non_retryable, self.clock.now(), event
        )
        self._published(events)
        self._sched().non_retryable_at = float("-inf")  # re-read the marks at the next failure
        return signature

    # -- the failure path (called by Engine.fail_jobs) ----------------------------------------------
    def _fingerprints(self, failures: Sequence[Failure]) -> dict[JobId, Fingerprint]:
        from jobengine.core import signatures as sg

        if self._scheduling_or_none() is None:
            return {}
        return {
            f.job_id: sg.fingerprint(f.error.type, f.error.message, f.error.traceback, EXCLUDED_FRAMES)
            for f in failures
            if f.outcome is not FailOutcome.CANCELLED
        }

    async def _apply_signature_policy(
        self, failures: Sequence[Failure], prints: Mapping[JobId, Fingerprint]
    ) -> Sequence[Failure]:
        """Failures that would retry with a non-retryable signature (of their tenant) go to dead instead."""
        state = self._sched()
        store = self._scheduling_or_none()
        if store is None or not prints:
            return failures
        now = self.clock.now()
        if now - state.non_retryable_at > self.settings.signature_cache_seconds:
            try:
                state.non_retryable = await store.non_retryable_signatures()
                state.non_retryable_keys = frozenset(k for _, k in state.non_retryable)
                state.non_retryable_at = now
            except Exception as exc:
                log.warning("could not read the non-retryable signatures (%s); using the last known", exc)
        marked = state.non_retryable_keys
        suspects = [
            f
            for f in failures
            if f.outcome is FailOutcome.RETRY and f.job_id in prints and prints[f.job_id].key in marked
        ]
        if not suspects:
            return failures
        # The key is marked in some tenant: read the jobs to learn theirs (rare, so not on every failure).
        tenants = {j.id: j.tenant for j in await self.store.get_jobs([f.job_id for f in suspects])}
        dead = {f.job_id for f in suspects if (tenants.get(f.job_id), prints[f.job_id].key) in state.non_retryable}
        return [replace(f, outcome=FailOutcome.DEAD, retry_at=None) if f.job_id in dead else f for f in failures]

    async def _record_signatures(self, prints: Mapping[JobId, Fingerprint], changed: Changed) -> None:
        """Count the failures the store applied (a fenced-out report is not counted). Best effort."""
        from jobengine.core.signatures import SignatureHit

        store = self._scheduling_or_none()
        if store is None or not prints:
            return
        now = self.clock.now()
        hits = [
            SignatureHit(job.tenant, prints[job.id], job.id, job.task, now)
            for job in changed.jobs
            if job.id in prints and job.state in (JobState.FAILED, JobState.DEAD)
        ]
        if not hits:
            return
        try:
            await store.record_signatures(hits, now)
        except Exception as exc:
            log.warning("failure signatures: could not record %d occurrence(s) (%s)", len(hits), exc)
