"""Jobs found by a prefix of their id, and actions on many jobs at once (``engine.jobs``).

Every edge that takes a job id (the CLI, the HTTP API, the dashboard) resolves it here, so a whole id and
any unique prefix of one (a short id, :func:`jobengine.core.ids.short_id`) work alike, by the resolver the
services of runs, schedules, webhooks, keys and signatures use too (:func:`jobengine.ports.ids.resolve_id`).
A bulk action looks at the jobs it is given (by ids, or the newest MAX_BULK a filter selects), keeps those
the action applies to (:func:`jobengine.core.selection.refusal`) and changes them BULK_CHUNK at a time, one
store transaction per chunk, with the same events and follow-ups as the single-job actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from jobengine.core.bounds import check_text
from jobengine.core.ids import IdKind, JobId
from jobengine.core.models import Job, JobFilter, check_filter
from jobengine.core.selection import (
    BULK_CHUNK,
    MAX_BULK,
    REFUSED_SHOWN,
    BulkAction,
    BulkResult,
    refusal,
)
from jobengine.core.states import JobState
from jobengine.errors import InvalidJob, NotFound
from jobengine.ports.deadletter import DeadLetterStore
from jobengine.ports.ids import resolve_id

if TYPE_CHECKING:
    from jobengine.engine import Engine


class JobSelection:
    """Id prefixes and bulk actions. Usage::

    job = await engine.jobs.resolve("0193a1b2-c3d4-7005")
    done = await engine.jobs.apply("cancel", filter=JobFilter(states=(JobState.QUEUED,), task="email"))
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def resolve(self, ident: str, tenant: str | None = None) -> Job:
        """The job whose id is ``ident`` or, failing that, the only one starting with it
        (:func:`~jobengine.ports.ids.resolve_id`: NotFound, AmbiguousId naming a few, InvalidJob
        ``job_id``)."""
        job_id = await self.resolve_id(ident, tenant)
        found = await self._engine.store.get_jobs([job_id], tenant)
        if not found:  # deleted by retention between the two reads
            raise NotFound("job", ident)
        return found[0]

    async def resolve_id(self, ident: str, tenant: str | None = None) -> JobId:
        """The whole id of the job ``ident`` names, whole or by a unique prefix (as :meth:`resolve`)."""
        return JobId(await resolve_id(self._engine.store, IdKind.JOB, ident, tenant))

    async def apply(
        self,
        action: BulkAction | str,
        *,
        ids: Sequence[str] | None = None,
        filter: JobFilter | None = None,
        tenant: str | None = None,
        reason: str = "cancelled by user",
        limit: int = MAX_BULK,
    ) -> BulkResult:
        """Apply ``action`` to the jobs named by ``ids`` (whole ids) or selected by ``filter`` (its own
        ``limit`` is replaced by ``limit``, at most MAX_BULK), of ``tenant`` when given. Exactly one of
        ``ids`` and ``filter``; InvalidJob naming the field otherwise."""
        act = action if isinstance(action, BulkAction) else BulkAction.parse(action)
        if (ids is None) == (filter is None):
            raise InvalidJob("ids", "give either ids or a filter")
        if not 1 <= limit <= MAX_BULK:
            raise InvalidJob("limit", f"must be from 1 to {MAX_BULK}")
        if act is BulkAction.CANCEL:
            check_text("reason", reason)
        more = False
        refused: list[tuple[JobId, str]] = []
        if ids is not None:
            if len(ids) > limit:
                raise InvalidJob("ids", f"at most {limit} ids")
            wanted = [JobId(i) for i in dict.fromkeys(ids)]
            jobs = await self._engine.store.get_jobs(wanted, tenant)
            known = {j.id for j in jobs}
            refused += [(i, "not found") for i in wanted if i not in known]
            matched = len(wanted)
        else:
            assert filter is not None
            scope = tenant if tenant is not None else filter.tenant
            scoped = check_filter(replace(filter, limit=limit + 1, tenant=scope))
            jobs = await self._engine.store.list_jobs(scoped)
            more = len(jobs) > limit
            jobs = jobs[:limit]
            matched = len(jobs)
        todo: list[Job] = []
        for job in jobs:
            why = refusal(act, job)
            if why is None:
                todo.append(job)
            else:
                refused.append((job.id, why))
        changed: list[JobId] = []
        for start in range(0, len(todo), BULK_CHUNK):
            changed += await self._apply_chunk(act, todo[start : start + BULK_CHUNK], tenant, reason)
        return BulkResult(act, matched, changed, refused[:REFUSED_SHOWN], len(refused), more)

    async def _apply_chunk(self, act: BulkAction, jobs: list[Job], tenant: str | None, reason: str) -> list[JobId]:
        eng = self._engine
        ids = [j.id for j in jobs]
        if act is BulkAction.DELETE:
            events = await cast(DeadLetterStore, eng.store).purge_dead_jobs(
                eng.clock.now(), len(ids), tenant=tenant, ids=ids
            )
            if events:
                eng.bus.publish(events)
            return [JobId(e.job_id) for e in events if e.job_id is not None]
        wanted = set(ids)
        changed = await (self.cancel(ids, reason, tenant) if act is BulkAction.CANCEL else self.requeue(ids, tenant))
        return [j.id for j in changed if j.id in wanted]

    async def cancel(self, ids: Sequence[JobId], reason: str, tenant: str | None = None) -> list[Job]:
        """Cancel these jobs (queued ones at once, running ones asked to stop); the jobs that changed."""
        eng = self._engine
        cancelled = await eng.store.cancel_jobs(ids, reason, eng.clock.now(), tenant)
        if cancelled.events:
            eng.bus.publish(cancelled.events)
        # A graph node an ``always`` policy lets run was queued again in the cancel's transaction: its run
        # no longer counts an outcome for it, and a worker must hear of it.
        jobs = cancelled.jobs
        revived = [j for j in jobs if j.graph_id is not None and j.state is JobState.QUEUED]
        if any(j.run_id is not None for j in jobs):
            await eng.runs.ended(jobs)
            await eng.runs.reopened([j for j in revived if j.run_id is not None])
        if revived:
            if eng.settings.queue.broker:
                await eng.transports.publish_jobs(revived, "unblocked")
            eng.notifier().notify()
        if any(j.graph_id is not None for j in jobs):
            await eng.graphs.ended(jobs)
        return jobs

    async def requeue(self, ids: Sequence[JobId], tenant: str | None = None) -> list[Job]:
        """Queue these finished jobs again with a fresh attempt budget; the jobs that changed. A broker hears
        of them again and their runs and graphs reopen, whichever action (retry, replay, bulk) queued them."""
        eng = self._engine
        retried = await eng.store.retry_jobs(ids, eng.clock.now(), tenant)
        if retried.events:
            eng.bus.publish(retried.events)
        if eng.settings.queue.broker:
            await eng.transports.publish_jobs(retried.jobs, "retried")
        if any(j.run_id is not None for j in retried.jobs):
            await eng.runs.reopened(retried.jobs)
        if any(j.graph_id is not None for j in retried.jobs):
            await eng.graphs.reopened(retried.jobs)
        eng.notifier().notify()
        return list(retried.jobs)
