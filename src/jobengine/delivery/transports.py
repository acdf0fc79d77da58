"""The engine's queue transports: its two logical queues (planner, runner) on the configured kind, their
metrics, and, for a broker, the outbox relay and the worker's source. ``engine.transports`` is one of these.

With ``queue.kind: database`` the store delivers work as it always has and this holds two
:class:`DatabaseTransport` views (health, depth, metrics). With ``redis`` or ``nats``:

- :meth:`enqueue` writes jobs and their outbox rows in one store transaction and hands the due ones to the
  relay, which publishes them at once, while the caller goes on;
- the relay (started by :meth:`start`) also publishes what that could not (the broker away), other
  processes' rows and rows that come due later, and deletes published rows in batches;
- :meth:`source` is the worker's source: deliveries in, claims by id, outcomes mirrored to the broker;
- a message delivered more than ``maxDeliveryAttempts`` times reaches :meth:`_exhausted` first, which
  marks its job dead in the store (so the store and the dead-letter stream agree) and then lets the
  transport dead-letter it;
- jobs made runnable later (a dependency succeeded, a manual retry) are published by :meth:`publish_jobs`
  after the store committed; if that publish is lost with its process, the relay's sweep publishes them.

The planner transport is for the scheduler (messages naming runs); the engine only checks its health.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import AttemptError, FailOutcome, Failure, Job, NewJob
from jobengine.core.queue_config import QUEUES, QueueConfig
from jobengine.core.states import RUNNABLE, JobState
from jobengine.core.transitions import expired_failure
from jobengine.delivery.factory import open_transport
from jobengine.delivery.metrics import QueueMetrics
from jobengine.delivery.relay import RUN_ID_KEY, SCHEDULE_ID_KEY, OutboxRelay
from jobengine.delivery.source import BrokeredSource, EngineParts
from jobengine.errors import ConfigError
from jobengine.ports.notifier import Notifier
from jobengine.ports.store import Store
from jobengine.ports.transport import Delivery, Health, Message, Transport, TransportOptions, dead_letter_all
from jobengine.ports.watermarks import Watermark
from jobengine.settings import Settings

if TYPE_CHECKING:
    from jobengine.ports.outbox import TransactionalOutboxStore

log = logging.getLogger("jobengine.delivery")


class HubEngine(EngineParts, Protocol):
    store: Store
    settings: Settings

    def notifier(self) -> Notifier: ...


def consumer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class Transports:
    def __init__(self, engine: HubEngine, config: QueueConfig | None = None, metrics: QueueMetrics | None = None):
        self.engine = engine
        self.config = config or engine.settings.queue
        self.metrics = metrics or QueueMetrics()
        self.kind = self.config.kind
        consumer = consumer_name()
        s = engine.settings
        job_queues = s.worker_queues or tuple(engine.tasks.queues()) or ("default",)
        opened: dict[str, Transport] = {}
        for name in QUEUES:
            options = TransportOptions(
                lease_seconds=s.lease_seconds,
                max_deliveries=self.config.max_delivery_attempts,
                dead_letter=self.config.dead_letter_enabled,
                idempotency_window=self.config.idempotency_window,
                consumer=consumer,
                counters=self.metrics.counters(self.kind, name),
                exhausted=self._exhausted if name == "runner" else dead_letter_all,
                new_history=self._new_history if name == "runner" else None,
            )
            opened[name] = open_transport(
                self.config, name, options, engine.store, job_queues if name == "runner" else ("planner",)
            )
        self.planner = opened["planner"]
        self.runner = opened["runner"]
        self.relay: OutboxRelay | None = None
        self._sources: list[BrokeredSource] = []

    @property
    def broker(self) -> bool:
        return self.config.broker

    @property
    def all(self) -> tuple[Transport, Transport]:
        return self.planner, self.runner

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the outbox relay (a broker only). Idempotent."""
        if not self.broker:
            return
        if self.relay is None:
            self.relay = OutboxRelay(
                self.engine.store, self.runner, self.engine.clock, self.engine.notifier(),
                sweep_after=self.config.sweep_after, hold=max(30.0, self.engine.settings.lease_seconds),
            )  # fmt: skip
        await self.relay.start()

    async def close(self) -> None:
        """Stop the relay (publishing what this process enqueued last), hand back unclaimed deliveries, close
        the broker connections. Idempotent."""
        if self.relay is not None:
            await self.relay.stop()
        for source in self._sources:
            await source.close()
        self._sources.clear()
        for t in self.all:
            try:
                await t.close()
            except Exception as exc:
                log.warning("closing the %s transport: %s", t.queue, exc)

    # -- enqueue ------------------------------------------------------------------------------------
    async def enqueue(
        self,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        connection: object | None = None,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
        headers: Mapping[JobId, Mapping[str, str]] | None = None,
    ) -> list[Job]:
        """Store jobs with their outbox rows in one transaction (the caller's, with ``connection``), then
        publish their events and hand the rows to the relay. ``headers``: per job, ``run_id`` / ``schedule_id``."""
        store = self.engine.store
        if connection is not None:
            if not store.capabilities.transactional_outbox:
                raise ConfigError("connection: this store cannot enqueue inside a caller's transaction")
            outboxed = await cast("TransactionalOutboxStore", store).insert_jobs_outboxed_in(
                connection, jobs, now, phases, headers=headers, watermarks=watermarks
            )
            return outboxed.inserted.jobs  # not committed yet: the relays find the rows once it is
        # Rows this process's relay will publish at once are born held by it, so no other relay takes them.
        relay = self.relay if self.relay is not None and self.relay.running else None
        hold = relay.hold if relay is not None else 0.0
        outboxed = await store.insert_jobs_outboxed(
            jobs, now, phases, headers=headers, watermarks=watermarks, hold=hold
        )
        if outboxed.inserted.events:
            self.engine.bus.publish(outboxed.inserted.events)
        if relay is not None and outboxed.rows:
            relay.offer(outboxed.rows)
        return outboxed.inserted.jobs

    async def publish_jobs(self, jobs: Sequence[Job], reason: str) -> None:
        """Publish messages for jobs that became runnable after a transition other than insert."""
        ready = [j for j in jobs if j.state in (JobState.QUEUED, JobState.SCHEDULED, JobState.FAILED)]
        if not self.broker or not ready:
            return
        messages = [
            Message(j.id, j.queue, key=f"{j.id}:{reason}:{j.attempt}:{int(j.updated_at * 1000)}") for j in ready
        ]
        try:
            await self.runner.publish(messages)
        except Exception as exc:
            log.warning("publishing %d %s job(s) failed (%s); the relay's sweep will", len(messages), reason, exc)

    # -- workers ------------------------------------------------------------------------------------
    def source(self) -> BrokeredSource:
        """A worker's source over the runner transport (a broker only)."""
        source = BrokeredSource(self.engine, self.engine.store, self.engine.store, self.runner, self.publish_jobs)
        self._sources.append(source)
        return source

    def _new_history(self, token: str) -> None:
        """The runner broker failed over or restarted: the relay publishes every runnable job again."""
        if self.relay is not None:
            self.relay.history_lost(token)

    async def _exhausted(self, deliveries: Sequence[Delivery]) -> Sequence[Delivery]:
        """The runner's exhausted-delivery hook: mark each job dead in the store (claiming it first if it is
        waiting, failing its attempt if its lease expired); only those are dead-lettered. A job running under
        a live lease, finished, blocked or unknown keeps its state and its message is simply settled."""
        engine, now = self.engine, self.engine.clock.now()
        by_id = {JobId(d.message.id): d for d in deliveries}
        jobs = await engine.store.get_jobs(list(by_id))
        error = f"delivered more than maxDeliveryAttempts ({self.config.max_delivery_attempts}) times"
        failures = [f for j in jobs if j.state is JobState.RUNNING and (f := expired_failure(j, now)) is not None]
        failures = [Failure(f.job_id, f.token, f.error, FailOutcome.DEAD, None, now) for f in failures]
        waiting = [j for j in jobs if j.state in RUNNABLE]
        if waiting:
            # Claimed (to be failed) as of its run_at when that is later: a job waiting for its retry is not
            # claimable before, and it must end now, with its message.
            at = max([now, *(j.run_at for j in waiting)])
            claimed = await self.engine.store.claim_jobs(
                [j.id for j in waiting], WorkerId("jobengine:dead-letter"), 60.0, at
            )
            engine.bus.publish(claimed.events)
            for j in claimed.jobs:
                assert j.lease_token is not None
                err = AttemptError(j.attempt, now, "MaxDeliveriesExceeded", error, None, "jobengine:dead-letter")
                failures.append(Failure(j.id, j.lease_token, err, FailOutcome.DEAD))
        if not failures:
            return []
        changed = await engine.transitions.fail_jobs(failures)
        return [by_id[j.id] for j in changed.jobs if j.id in by_id and j.state is JobState.DEAD]

    # -- health and metrics -------------------------------------------------------------------------
    async def health(self) -> list[Health]:
        """Both logical queues' transports, one round trip each (never raises)."""
        return [await t.health() for t in self.all]

    async def refresh_metrics(self) -> None:
        await self.metrics.refresh(self.all)


def outbox_headers(run_id: str | None = None, schedule_id: str | None = None) -> dict[str, str]:
    """The ``headers`` of :meth:`Transports.enqueue` for a job that belongs to a scheduled run."""
    out = {}
    if run_id:
        out[RUN_ID_KEY] = run_id
    if schedule_id:
        out[SCHEDULE_ID_KEY] = schedule_id
    return out
