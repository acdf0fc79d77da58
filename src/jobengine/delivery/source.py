"""The worker's source when a broker delivers (Redis, NATS): the worker runtime is unchanged.

:class:`BrokeredSource` receives deliveries and claims *exactly those jobs* in the store
(``OutboxStore.claim_jobs``, fenced, so a duplicate message never starts a job twice; a limited queue's
through ``engine.flow.claim_limited`` restricted to the delivered ids). Outcomes go to the store first,
then mirror to the broker; a broker error after the store committed is logged, not raised (the message
comes back and finds the job settled). How each unclaimable delivery is settled, and why deliveries held
back by a queue's limits are *kept* rather than retried: docs/brokers.md ("Claims by id").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from jobengine.bus import EventBus
from jobengine.core.clock import Clock
from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import Changed, Completion, FailOutcome, Failure, Heartbeat, Job, Json, Lease, PhaseUpdate
from jobengine.core.states import RUNNABLE, JobState
from jobengine.core.transitions import expired_failure
from jobengine.errors import TransportError
from jobengine.ports.flow import FlowHooks
from jobengine.ports.outbox import OutboxStore
from jobengine.ports.store import Store
from jobengine.ports.transport import Delivery, Transport
from jobengine.ports.workers import WorkerInfo
from jobengine.tasks import TaskRegistry

if TYPE_CHECKING:
    from jobengine.worker.source import WorkerSource

log = logging.getLogger("jobengine.delivery")

#: Seconds before a delivery this worker cannot take (a queue it does not serve, a task it does not run)
#: comes back, to any worker: soon, yet not in a tight loop among workers that all lack it.
FOREIGN_DELAY = 0.25


class EngineParts(Protocol):
    """What the source uses of the engine: its instrumented transitions (events on the bus, wake-ups) and
    its flow control (claims under a queue's rule)."""

    clock: Clock
    tasks: TaskRegistry
    bus: EventBus

    @property
    def flow(self) -> FlowHooks: ...

    @property
    def transitions(self) -> WorkerSource: ...


Publish = Callable[[Sequence[Job], str], Awaitable[None]]


class BrokerNotifier:
    """The worker pump's notifier over a broker: ``wait`` receives (blocking), keeping what arrived."""

    def __init__(self, source: BrokeredSource) -> None:
        self._source = source

    def notify(self) -> None:
        pass

    async def wait(self, timeout: float) -> bool:
        """Like every notifier, never raises: with the broker unreachable it waits (a little) and answers
        True, so the pump tries a fetch, which backs off on its own errors."""
        try:
            return await self._source.receive_ahead(timeout)
        except TransportError as exc:
            log.warning("waiting for deliveries failed (%s); polling again", exc)
            await asyncio.sleep(min(timeout, 0.2))
            return True

    async def close(self) -> None:
        pass


class BrokeredSource:
    def __init__(
        self, engine: EngineParts, store: Store, outbox: OutboxStore, transport: Transport, publish: Publish
    ) -> None:
        self.engine = engine
        self.clock = engine.clock
        self.tasks = engine.tasks
        self.store = store
        self.outbox = outbox
        self.transport = transport
        self._publish = publish
        self._ahead: list[Delivery] = []  # received while waiting, not yet claimed
        self._want = 1  # how many the last fetch came short of
        # (job id, lease token) -> the delivery the attempt was claimed with. Keyed by the attempt, not the job:
        # once the store has an attempt's outcome, the job can be queued again (a replay, a manual retry) and
        # its new message claimed here before that outcome reaches the broker; each settles its own message.
        self._held: dict[tuple[JobId, LeaseToken], Delivery] = {}
        self._waiting: list[Delivery] = []  # held back by their queue's limits (or pause): claimed later
        self._notifier = BrokerNotifier(self)

    def notifier(self) -> BrokerNotifier:
        return self._notifier

    async def receive_ahead(self, timeout: float) -> bool:
        if self._ahead:
            return True
        want = max(1, self._want) - len(self._waiting)
        if want <= 0:
            # As many kept as the worker asked for: receive no more; the next fetch tries them again.
            await asyncio.sleep(timeout)
            return False
        self._ahead = await self.transport.receive(want, wait=timeout)
        return bool(self._ahead)

    async def close(self) -> None:
        """Hand back what was received and never claimed."""
        ahead, self._ahead = self._ahead + self._waiting, []
        self._waiting = []
        if ahead:
            await self._quietly(self.transport.release(ahead), "releasing unclaimed deliveries")

    # -- claiming -----------------------------------------------------------------------------------
    async def fetch_jobs(
        self, queues: Sequence[str], limit: int, worker: WorkerId, lease_seconds: float, *, tasks: Sequence[str]
    ) -> list[Job]:
        deliveries, self._ahead = self._ahead[:limit], self._ahead[limit:]
        received = bool(deliveries)
        room = limit - len(deliveries)
        deliveries += self._waiting[:room]
        self._waiting = self._waiting[room:]
        if not received and len(deliveries) < limit:
            # Not after a wait that received: those deliveries are claimed without another round trip to the
            # broker first, and the pump's next wait receives what came meanwhile.
            deliveries += await self.transport.receive(limit - len(deliveries), wait=0.0)
        jobs = await self._claim(deliveries, set(queues), worker, lease_seconds, tasks) if deliveries else []
        self._want = max(1, limit - len(jobs))
        await self._extend_waiting()
        return jobs

    async def _claim(
        self, deliveries: Sequence[Delivery], queues: set[str], worker: WorkerId, lease: float, tasks: Sequence[str]
    ) -> list[Job]:
        wanted: dict[JobId, Delivery] = {}
        extra: list[Delivery] = []  # a second message for a job in this batch: the first one settles the job
        foreign: list[Delivery] = []
        for d in deliveries:
            job_id = JobId(d.message.id)
            if d.message.queue not in queues:
                foreign.append(d)
            elif job_id in wanted:
                extra.append(d)
            else:
                # Also a job an attempt here holds: only the store tells a copy of its message (the job still
                # runs under our lease) from the job's next run (its outcome is stored, the job queued again).
                wanted[job_id] = d
        # Settling the deliveries that start nothing must not lose the ones that did: a broker error here is
        # logged, and those messages come back after their lease.
        if foreign:
            await self._quietly(self.transport.release(foreign, FOREIGN_DELAY), "handing back")
        jobs, limited = await self._claim_ids(wanted, worker, lease, tasks)
        claimed = {j.id for j in jobs}
        rest = {i: d for i, d in wanted.items() if i not in claimed}
        if rest:
            jobs += await self._settle_unclaimed(rest, limited, worker, lease, tasks)
        if extra:
            await self._quietly(self.transport.ack(extra), "acknowledging duplicates")
        return jobs

    async def _claim_ids(
        self, wanted: dict[JobId, Delivery], worker: WorkerId, lease: float, tasks: Sequence[str]
    ) -> tuple[list[Job], set[str]]:
        """Claim the delivered jobs: those of queues without limits by id; a queue with a cap or flow limits
        under its rule, as a database claim (restricted to these ids); a paused queue's not at all. Also
        returns the queues whose jobs the limits (or a pause) may have held back."""
        if not wanted:
            return [], set()
        plan = await self.engine.flow.claim_plan(sorted({d.message.queue for d in wanted.values()}), len(wanted))
        free = {q for group, _, rule in plan if rule is None for q in group}
        limited = {d.message.queue for d in wanted.values()} - free
        now = self.clock.now()
        jobs: list[Job] = []
        for group, _, rule in plan:
            ids = [i for i, d in wanted.items() if d.message.queue in group]
            if not ids:
                continue
            if rule is None:
                changed = await self.outbox.claim_jobs(ids, worker, lease, now, tasks=tasks)
            else:
                changed = await self.engine.flow.claim_limited(
                    replace(rule, ids=tuple(ids)), len(ids), worker, lease, now, tasks=tasks
                )
            if changed.events:
                self.engine.bus.publish(changed.events)
            for job in changed.jobs:
                assert job.lease_token is not None  # a claimed job has its lease
                self._held[(job.id, job.lease_token)] = wanted[job.id]
            jobs += changed.jobs
        return jobs, limited

    async def _settle_unclaimed(
        self, rest: dict[JobId, Delivery], limited: set[str], worker: WorkerId, lease: float, tasks: Sequence[str]
    ) -> list[Job]:
        now = self.clock.now()
        found = {j.id: j for j in await self.store.get_jobs(list(rest))}
        runs = set(tasks)
        ack: list[Delivery] = []
        later: dict[float, list[Delivery]] = {}
        expired: list[Failure] = []
        keep: list[Delivery] = []  # due now, held back by the queue's limits: kept, claimed later
        foreign: list[Delivery] = []  # a task this worker does not run: handed back, for a worker that does
        for job_id, d in rest.items():
            job = found.get(job_id)
            if job is None or job.terminal or job.state in (JobState.BLOCKED, JobState.CANCELLED):
                ack.append(d)
            elif job.state in RUNNABLE and job.task not in runs:
                foreign.append(d)
            elif (
                job.state is JobState.RUNNING
                and job.lease_token is not None
                and (job_id, job.lease_token) in self._held
            ):
                ack.append(d)  # a copy of the message an attempt here runs with: that one settles the job
            elif job.state is JobState.RUNNING:
                if job.lease_expires_at is not None and job.lease_expires_at < now:
                    f = expired_failure(job, now)
                    if f is not None:
                        expired.append(f)
                else:
                    wait = (job.lease_expires_at or now) - now + 1.0
                    later.setdefault(round(wait, 1), []).append(d)
            elif job.state in RUNNABLE and job.run_at <= now and job.queue in limited:
                keep.append(d)
            elif job.state in RUNNABLE:
                later.setdefault(round(max(0.0, job.run_at - now), 3), []).append(d)
            else:
                ack.append(d)
        jobs: list[Job] = []
        if expired:
            # The worker holding it died: its attempt fails now, as the rescuer would record it.
            changed = await self.engine.transitions.fail_jobs(expired)
            dead = [rest[j.id] for j in changed.jobs if j.id in rest and j.state is JobState.DEAD]
            if dead:
                reason = "lease expired on the job's last attempt"
                await self._quietly(self.transport.dead_letter(dead, reason), "dead-lettering")
            gone = {j.id for j in changed.jobs if j.state is JobState.DEAD}
            # Claim them again (also those another rescuer failed first); one claimed by another worker
            # meanwhile comes back later and then finds it running or finished.
            again = {f.job_id: rest[f.job_id] for f in expired if f.job_id not in gone}
            jobs, limited_again = await self._claim_ids(again, worker, lease, tasks)
            claimed = {j.id for j in jobs}
            for i, d in again.items():
                if i not in claimed:
                    (keep if d.message.queue in limited_again else later.setdefault(1.0, [])).append(d)
        if ack:
            await self._quietly(self.transport.ack(ack), "acknowledging")
        if foreign:
            await self._quietly(self.transport.release(foreign, FOREIGN_DELAY), "handing back")
        for delay, ds in later.items():
            await self._quietly(self.transport.retry(ds, delay), "retrying later")
        self._waiting += keep
        return jobs

    async def _extend_waiting(self) -> None:
        """Renew the broker's lease of kept deliveries past half their lease (an extension counts no
        delivery), so no other receiver is handed a job that waits here for its queue's limits."""
        lease = self.transport.options.lease_seconds
        now = time.time()  # a Delivery's lease_until is the transport's wall clock
        due = [d for d in self._waiting if d.lease_until - now < lease / 2]
        if not due:
            return
        try:
            await self.transport.extend(due)
        except Exception as exc:
            log.warning("extending the leases of deliveries waiting for their queue's limits failed (%s)", exc)
            return
        renewed = {d.receipt: replace(d, lease_until=now + lease) for d in due}
        self._waiting = [renewed.get(d.receipt, d) for d in self._waiting]

    # -- outcomes -----------------------------------------------------------------------------------
    def _take(self, attempts: Sequence[tuple[JobId, LeaseToken]]) -> list[Delivery]:
        return [d for a in attempts if (d := self._held.pop(a, None)) is not None]

    async def _quietly(self, call: Awaitable[None], doing: str) -> None:
        try:
            await call
        except Exception as exc:
            # The store has the outcome; the broker delivers the message again and it finds the job settled.
            log.warning("%s failed (%s); the broker will deliver the message(s) again", doing, exc)

    async def complete_jobs(self, completions: Sequence[Completion]) -> Changed:
        changed = await self.engine.transitions.complete_jobs(completions)
        mine = {c.job_id for c in completions}
        done = {j.id for j in changed.jobs if j.id in mine and j.state is JobState.SUCCEEDED}
        self._forget([(c.job_id, c.token) for c in completions if c.job_id not in done])
        taken = self._take([(c.job_id, c.token) for c in completions if c.job_id in done])
        await self._quietly(self.transport.ack(taken), "acknowledging")
        unblocked = [j for j in changed.jobs if j.id not in mine and j.state in (JobState.QUEUED, JobState.SCHEDULED)]
        if unblocked:
            await self._quietly(self._publish(unblocked, "unblocked"), "publishing unblocked jobs")
        return changed

    async def fail_jobs(self, failures: Sequence[Failure]) -> Changed:
        # A retry the broker would not deliver (this was the message's last delivery) is the job's end: the
        # store records it dead, and the message goes to the dead-letter stream with it.
        limit = self.transport.options.max_deliveries
        last = {
            f.job_id
            for f in failures
            if f.outcome is FailOutcome.RETRY
            and (d := self._held.get((f.job_id, f.token))) is not None
            and d.attempt >= limit
        }
        if last:
            failures = [
                replace(f, outcome=FailOutcome.DEAD, retry_at=None) if f.job_id in last else f for f in failures
            ]
        changed = await self.engine.transitions.fail_jobs(failures)
        now = self.clock.now()
        by_id = {j.id: j for j in changed.jobs}
        errors = {
            f.job_id: f"{f.error.message} (delivered {limit} times, maxDeliveryAttempts {limit})"
            if f.job_id in last
            else f.error.message
            for f in failures
        }
        for f in failures:
            job = by_id.get(f.job_id)
            if job is None:
                self._forget([(f.job_id, f.token)])
                continue
            ds = self._take([(f.job_id, f.token)])
            if not ds:
                continue
            if job.state is JobState.FAILED:
                await self._quietly(self.transport.retry(ds, max(0.0, job.run_at - now)), "retrying")
            elif job.state is JobState.DEAD:
                await self._quietly(self.transport.dead_letter(ds, errors[f.job_id]), "dead-lettering")
            else:
                await self._quietly(self.transport.ack(ds), "acknowledging")
        # Graph nodes a failure policy lets run (``continue``, ``always``) were queued again in the failure's
        # own transaction: no worker hears of them unless they are published like unblocked dependents.
        failed = {f.job_id for f in failures}
        revived = [j for j in by_id.values() if j.id not in failed and j.state in (JobState.QUEUED, JobState.SCHEDULED)]
        if revived:
            await self._quietly(self._publish(revived, "unblocked"), "publishing the nodes a failure lets run")
        return changed

    async def release_jobs(self, leases: Sequence[Lease]) -> Changed:
        changed = await self.engine.transitions.release_jobs(leases)
        released = {j.id for j in changed.jobs}
        self._forget([(lease.job_id, lease.token) for lease in leases if lease.job_id not in released])
        taken = self._take([(lease.job_id, lease.token) for lease in leases if lease.job_id in released])
        await self._quietly(self.transport.release(taken), "releasing")
        return changed

    def _forget(self, attempts: Sequence[tuple[JobId, LeaseToken]]) -> None:
        for a in attempts:
            self._held.pop(a, None)

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> Heartbeat:
        hb = await self.engine.transitions.heartbeat_jobs(leases, lease_seconds)
        self._forget([(lease.job_id, lease.token) for lease in leases if lease.job_id not in hb.held])
        attempts = [(lease.job_id, lease.token) for lease in leases if lease.job_id in hb.held]
        held = [d for a in attempts if (d := self._held.get(a)) is not None]
        await self._quietly(self.transport.extend(held), "extending broker leases")
        await self._extend_waiting()
        return hb

    async def save_phases(self, updates: Sequence[PhaseUpdate]) -> Changed:
        return await self.engine.transitions.save_phases(updates)

    async def rescue_jobs(self) -> Changed:
        return await self.engine.transitions.rescue_jobs()

    async def register_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await self.engine.transitions.register_worker(info)

    async def beat_worker(self, worker: WorkerId) -> bool:
        return await self.engine.transitions.beat_worker(worker)

    async def unregister_worker(self, worker: WorkerId) -> None:
        await self.engine.transitions.unregister_worker(worker)

    async def rescue_dead_workers(self) -> Changed:
        """A dead worker's jobs, failed in the store, are published again: the messages it held would
        come back only after their broker lease."""
        changed = await self.engine.transitions.rescue_dead_workers()
        if changed.jobs:
            await self._quietly(self._publish(changed.jobs, "rescued"), "publishing rescued jobs")
        return changed

    async def parent_results(self, job: Job) -> dict[str, Json]:
        return await self.engine.transitions.parent_results(job)

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        """None (the relay publishes a job when it is due, so there is nothing to poll for), unless kept
        deliveries wait for a rate-limited queue: then when its next token may be there, as for a database
        claim (a cap waits for the poll interval)."""
        if not self._waiting:
            return None
        plan = await self.engine.flow.claim_plan(sorted({d.message.queue for d in self._waiting}), 1)
        now = self.clock.now()
        tokens = [self.engine.flow.token_at(r.queue, r.rate, now) for _, _, r in plan if r is not None and r.rate]
        return min(tokens) if tokens else None
