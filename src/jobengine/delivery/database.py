"""The ``database`` transport: the store itself delivers, and a runnable job *is* its queue's message.

Receive is ``fetch_jobs`` after rescuing expired leases, extend a heartbeat, ack a completion, retry a
failed attempt, dead-letter the job's ``dead`` state; deliveries are attempts (``max_attempts``) and the
idempotency key stands for a publish window (docs/brokers.md). The engine's worker calls the store
directly; this class gives the database the port's shape for health, depth, metrics and the transport
contract suite. ``options.dead_letter`` False changes nothing: the store never drops a job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from jobengine.core.clock import Clock, SystemClock
from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure, JobFilter, Lease
from jobengine.core.states import JobState
from jobengine.core.transitions import expired_failure
from jobengine.ports.store import Store
from jobengine.ports.transport import DeadLetter, Delivery, Health, Message, TransportCapabilities, TransportOptions


class DatabaseTransport:
    capabilities = TransportCapabilities(
        name="database", broker=False, dedupe=False, dead_letter_stream=False, message_headers=False,
        blocking_receive=False,
    )  # fmt: skip

    def __init__(
        self,
        store: Store,
        queue: str,
        job_queues: Sequence[str],
        options: TransportOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.queue = queue
        self.job_queues = tuple(job_queues)
        self.options = options or TransportOptions()
        self.clock: Clock = clock or SystemClock()

    def _delivery(self, job_id: JobId, queue: str, token: str | None, attempt: int, until: float | None) -> Delivery:
        message = Message(job_id, queue)
        return Delivery(message, token or "", attempt, until or 0.0, message.body())

    async def publish(self, messages: Sequence[Message]) -> list[bool]:
        """Nothing to do: the job rows are the messages. True for each message whose job exists."""
        found = {j.id for j in await self.store.get_jobs([JobId(m.id) for m in messages])}
        return [m.id in found for m in messages]

    async def _rescue(self, now: float) -> None:
        expired = await self.store.expired_jobs(now, 1000)
        failures = [f for j in expired if j.queue in self.job_queues and (f := expired_failure(j, now))]
        if failures:
            changed = await self.store.fail_jobs(failures, now)
            self.options.counters.count("lease_expired", len(changed.jobs))
            dead = sum(1 for j in changed.jobs if j.state is JobState.DEAD)
            if dead:
                self.options.counters.count("dead_lettered", dead)

    async def receive(self, limit: int, wait: float = 0.0) -> list[Delivery]:
        deadline = time.monotonic() + wait
        notifier = self.store.notifier()
        while True:
            now = self.clock.now()
            await self._rescue(now)
            changed = await self.store.fetch_jobs(
                self.job_queues, limit, WorkerId(self.options.consumer), self.options.lease_seconds, now
            )
            if changed.jobs or time.monotonic() >= deadline:
                return [
                    self._delivery(j.id, j.queue, j.lease_token, j.attempt, j.lease_expires_at) for j in changed.jobs
                ]
            await notifier.wait(min(0.05, max(0.0, deadline - time.monotonic())))

    def _leases(self, deliveries: Sequence[Delivery]) -> list[Lease]:
        return [Lease(JobId(d.message.id), LeaseToken(d.receipt)) for d in deliveries]

    async def extend(self, deliveries: Sequence[Delivery]) -> None:
        if deliveries:
            now = self.clock.now()
            await self.store.heartbeat_jobs(self._leases(deliveries), now + self.options.lease_seconds, now)

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        if deliveries:
            completions = [Completion(lease.job_id, lease.token) for lease in self._leases(deliveries)]
            changed = await self.store.complete_jobs(completions, self.clock.now())
            self.options.counters.count("acked", len(changed.jobs))

    async def _fail(self, deliveries: Sequence[Delivery], outcome: FailOutcome, message: str, delay: float) -> int:
        now = self.clock.now()
        failures = [
            Failure(
                lease.job_id,
                lease.token,
                AttemptError(d.attempt, now, "Transport", message),
                outcome,
                retry_at=now + delay if outcome is FailOutcome.RETRY else None,
            )
            for d, lease in zip(deliveries, self._leases(deliveries), strict=True)
        ]
        changed = await self.store.fail_jobs(failures, now)
        mine = {f.job_id for f in failures}
        return sum(1 for j in changed.jobs if j.id in mine)  # not the dependents it cancelled

    async def retry(self, deliveries: Sequence[Delivery], delay: float) -> None:
        """A failed attempt, again at now + ``delay``; the job's last attempt goes to ``dead`` instead."""
        if not deliveries:
            return
        jobs = {j.id: j for j in await self.store.get_jobs([JobId(d.message.id) for d in deliveries])}
        last = [d for d in deliveries if (j := jobs.get(JobId(d.message.id))) and j.attempt >= j.max_attempts]
        again = [d for d in deliveries if d not in last]
        if again:
            self.options.counters.count("retried", await self._fail(again, FailOutcome.RETRY, "retry", delay))
        if last:
            reason = f"delivered {max(d.attempt for d in last)} times without success (the job's max_attempts)"
            await self.dead_letter(last, reason)

    async def release(self, deliveries: Sequence[Delivery], delay: float = 0.0) -> None:
        """Queued again at once: a job's row is claimed only by a worker that runs its task, so nothing needs
        to wait out ``delay`` here."""
        if deliveries:
            await self.store.release_jobs(self._leases(deliveries), self.clock.now())

    async def dead_letter(self, deliveries: Sequence[Delivery], reason: str) -> None:
        if deliveries:
            self.options.counters.count("dead_lettered", await self._fail(deliveries, FailOutcome.DEAD, reason, 0.0))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Dead jobs of the transport's queues, oldest first; the reason is the job's."""
        out: list[DeadLetter] = []
        for queue in self.job_queues:
            for job in await self.store.list_jobs(JobFilter(states=(JobState.DEAD,), queue=queue, limit=limit)):
                d = self._delivery(job.id, job.queue, None, job.attempt, None)
                headers = d.message.dead_letter_headers(job.reason or "", job.attempt)
                out.append(DeadLetter(d.message, headers, d.body))
        out.sort(key=lambda dl: dl.message.id)
        return out[:limit]

    async def depth(self) -> int:
        """Jobs of the transport's queues that are not finished (waiting, blocked, running)."""
        counts = await self.store.count_jobs(finished=False)
        return sum(n for (queue, _), n in counts.items() if queue in self.job_queues)

    async def health(self) -> Health:
        started = time.perf_counter()
        try:
            await self.store.next_run_at(self.job_queues)
        except Exception as exc:
            return Health("database", self.queue, False, 1000 * (time.perf_counter() - started), str(exc))
        detail = f"queues {', '.join(self.job_queues)}"
        return Health("database", self.queue, True, 1000 * (time.perf_counter() - started), detail)

    async def close(self) -> None:
        """The store is the engine's; closing it is the engine's business."""
