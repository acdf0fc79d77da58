"""The worker protocol: every job transition a worker (in process, over HTTP, over a broker) asks for.

Each transition is one store call followed by one ``after`` step: its events are published on the bus,
workers are woken when jobs became runnable, and the observers learn what changed (flow control, run
summaries, failure signatures, through the hooks below). Nothing else writes a transition of a running
job, so a worker that holds a :class:`Transitions` cannot bypass that bookkeeping. ``engine.transitions``
is the engine's; it is what :meth:`Engine.worker` hands the worker as its source. Usage::

    jobs = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w1"), 30.0)
    await engine.transitions.complete_jobs([Completion(j.id, j.lease_token, "ok") for j in jobs])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import (
    AttemptError,
    Changed,
    Completion,
    Event,
    FailOutcome,
    Failure,
    Heartbeat,
    Job,
    Json,
    Lease,
    PhaseUpdate,
)
from jobengine.core.states import JobState
from jobengine.core.transitions import expired_failure
from jobengine.errors import JobEngineError, StoreError

if TYPE_CHECKING:
    from jobengine.bus import EventBus
    from jobengine.core.clock import Clock
    from jobengine.core.signatures import Fingerprint
    from jobengine.fleet import Fleet
    from jobengine.ports.flow import FlowHooks
    from jobengine.ports.notifier import Notifier
    from jobengine.ports.store import Store
    from jobengine.ports.workers import WorkerInfo
    from jobengine.tasks import TaskRegistry

#: Expired leases one rescue pass takes; the next pass takes the rest.
RESCUE_BATCH = 1000


class RunHooks(Protocol):
    """Run summaries, kept as their jobs move (best effort: the scheduler reconciles what is missed)."""

    async def started(self, jobs: Sequence[Job]) -> None: ...

    async def ended(self, jobs: Sequence[Job]) -> None: ...

    async def reopened(self, jobs: Sequence[Job]) -> None: ...


class GraphHooks(Protocol):
    """Graphs of jobs (:mod:`jobengine.engine.graphs`): their nodes' ends, and the results a node receives."""

    async def ended(self, jobs: Sequence[Job]) -> None: ...

    async def parent_results(self, job: Job) -> dict[str, Json]: ...

    async def expand(self, completion: Completion) -> Changed:
        """Complete a node and store the nodes it adds, in one transaction; InvalidJob (or what an enqueue
        raises for a node's job) when they cannot be added, and then nothing is stored."""
        ...


class SignatureHooks(Protocol):
    """Failure signatures: fingerprinted before the store records a failure, counted after."""

    async def prepare(self, failures: Sequence[Failure]) -> tuple[list[Failure], dict[JobId, Fingerprint]]:
        """The failures to record (one that would retry with a non-retryable signature goes dead instead),
        and the fingerprint of each."""
        ...

    async def record(self, prints: Mapping[JobId, Fingerprint], changed: Changed) -> None: ...


def _refused(completion: Completion, exc: JobEngineError, now: float, job: Job | None) -> Failure:
    """The failure of a node whose completion added nodes its graph refused: dead, with that error (a retry
    would add the same nodes), recorded on the attempt and worker that hold ``job``'s lease."""
    attempt, worker = (job.attempt, job.lease_worker) if job is not None else (0, None)
    error = AttemptError(attempt, now, type(exc).__name__, str(exc), None, worker)
    return Failure(completion.job_id, completion.token, error, FailOutcome.DEAD)


class Transitions:
    """The instrumented transitions of running jobs (:class:`jobengine.worker.source.WorkerSource`).

    ``notifier`` is a callable: the notifier is opened on first use. ``fleet`` is the registry of live
    workers; it fails the jobs of dead workers through :meth:`fail_jobs`.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        tasks: TaskRegistry,
        bus: EventBus,
        *,
        notifier: Callable[[], Notifier],
        fleet: Fleet,
        flow: FlowHooks,
        runs: Callable[[], RunHooks],
        signatures: Callable[[], SignatureHooks],
        graphs: Callable[[], GraphHooks],
    ) -> None:
        self.store = store
        self.clock = clock
        self.tasks = tasks
        self.bus = bus
        self._notifier = notifier
        self.fleet = fleet
        self.flow = flow
        # Built on first use: a worker that runs only plain jobs and never fails one never loads them.
        self._runs = runs
        self._signatures = signatures
        self._graphs = graphs

    def notifier(self) -> Notifier:
        return self._notifier()

    # -- claims -------------------------------------------------------------------------------------
    async def fetch_jobs(
        self,
        queues: Sequence[str],
        limit: int,
        worker: WorkerId,
        lease_seconds: float,
        *,
        tasks: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` runnable jobs of ``queues``. Paused queues are left out and a queue with a
        concurrency limit or flow limits is claimed under its rule (:meth:`FlowHooks.claim_plan`).
        ``tasks`` / ``tenant`` restrict the claim to those task names (a worker's: it claims only what it
        can run) / that tenant (a remote worker's key)."""
        now = self.clock.now()
        jobs: list[Job] = []
        for group, n, rule in await self.flow.claim_plan(queues, limit):
            n = min(n, limit - len(jobs))
            if n <= 0:
                break
            if rule is not None:  # decided inside the store's claim transaction
                changed = await self.flow.claim_limited(rule, n, worker, lease_seconds, now, tasks=tasks, tenant=tenant)
            else:
                changed = await self.store.fetch_jobs(group, n, worker, lease_seconds, now, tasks=tasks, tenant=tenant)
            self._publish(changed.events)
            jobs.extend(changed.jobs)
        if any(j.run_id is not None for j in jobs):
            await self._runs().started(jobs)
        return jobs

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        """When a worker that found nothing should look again (None: when woken, or at its poll)."""
        return await self.flow.next_run_at(queues, tasks)

    # -- running jobs -------------------------------------------------------------------------------
    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> Heartbeat:
        now = self.clock.now()
        return await self.store.heartbeat_jobs(leases, now + lease_seconds, now)

    async def save_phases(self, updates: Sequence[PhaseUpdate]) -> Changed:
        changed = await self.store.save_phases(updates, self.clock.now())
        await self._after(changed)
        return changed

    async def complete_jobs(
        self, completions: Sequence[Completion], *, refused: Literal["fail", "raise"] = "fail"
    ) -> Changed:
        """Completions that add nodes to their graph (:attr:`Completion.nodes`) are stored one transaction
        each with their nodes. One whose nodes the graph refuses ends its node dead with that error
        (``refused="fail"``), or raises it and leaves the node running (``"raise"``, for one completion:
        the HTTP worker protocol answers 422 and its worker reports again)."""
        plain = [c for c in completions if not c.nodes]
        changed = await self.store.complete_jobs(plain, self.clock.now()) if plain else Changed()
        refusals: list[tuple[Completion, JobEngineError]] = []
        for c in completions:
            if c.nodes:
                try:
                    more = await self._graphs().expand(c)
                except StoreError:
                    raise  # the store's trouble, not the nodes': the worker reports the completion again
                except JobEngineError as exc:
                    if refused == "raise":
                        raise
                    refusals.append((c, exc))
                    continue
                changed = Changed([*changed.jobs, *more.jobs], [*changed.events, *more.events])
        # More jobs than completions, or a queued one: dependents became runnable.
        woke = len(changed.jobs) > len(completions) or any(j.state is JobState.QUEUED for j in changed.jobs)
        await self._after(changed, finished=True, wake=woke)
        if refusals:
            held = {j.id: j for j in await self.store.get_jobs([c.job_id for c, _ in refusals])}
            now = self.clock.now()
            failed = await self.fail_jobs([_refused(c, exc, now, held.get(c.job_id)) for c, exc in refusals])
            changed = Changed([*changed.jobs, *failed.jobs], [*changed.events, *failed.events])
        return changed

    async def fail_jobs(self, failures: Sequence[Failure]) -> Changed:
        """Every failed attempt passes here (the worker's, the rescuer's): it is fingerprinted, a failure
        with a non-retryable signature goes to dead instead of retrying, and after the store recorded the
        failures their signatures and the summaries of their runs are updated (best effort)."""
        failures, prints = await self._signatures().prepare(failures)
        changed = await self.store.fail_jobs(failures, self.clock.now())
        # A queued job beyond the failed ones: a graph node a failure policy lets run.
        failed = {f.job_id for f in failures}
        woke = any(j.state is JobState.QUEUED and j.id not in failed for j in changed.jobs)
        await self._after(changed, finished=True, prints=prints, wake=woke)
        return changed

    async def release_jobs(self, leases: Sequence[Lease]) -> Changed:
        changed = await self.store.release_jobs(leases, self.clock.now())
        await self._after(changed, wake=bool(changed.jobs))
        return changed

    # -- rescue -------------------------------------------------------------------------------------
    async def rescue_jobs(self) -> Changed:
        """Jobs whose lease expired (their worker died) count a failed attempt and run again now."""
        now = self.clock.now()
        expired = await self.store.expired_jobs(now, RESCUE_BATCH)
        failures = [f for job in expired if (f := expired_failure(job, now)) is not None]
        if not failures:
            return Changed()
        changed = await self.fail_jobs(failures)  # the one failure path: signatures and run summaries too
        self.notifier().notify()
        return changed

    async def parent_results(self, job: Job) -> dict[str, Json]:
        """The results node ``job`` receives from its parents, by node name (empty for a plain job)."""
        return await self._graphs().parent_results(job) if job.graph_id is not None else {}

    # -- the registry of live workers ---------------------------------------------------------------
    async def register_worker(self, info: WorkerInfo) -> WorkerInfo:
        return await self.fleet.register(info)

    async def beat_worker(self, worker: WorkerId) -> bool:
        return await self.fleet.beat(worker)

    async def unregister_worker(self, worker: WorkerId) -> None:
        await self.fleet.unregister(worker)

    async def rescue_dead_workers(self) -> Changed:
        """The jobs of workers whose process is gone run again now (:meth:`Fleet.rescue_dead`)."""
        changed = await self.fleet.rescue_dead()
        if changed.jobs:
            self.notifier().notify()
        return changed

    # -- after every transition ---------------------------------------------------------------------
    def _publish(self, events: Sequence[Event]) -> None:
        if events:
            self.bus.publish(events)

    async def _after(
        self,
        changed: Changed,
        *,
        finished: bool = False,
        wake: bool = False,
        prints: Mapping[JobId, Fingerprint] | None = None,
    ) -> None:
        """Publish the events; for ``finished`` attempts, let flow control observe them, count their
        signatures (``prints``) and update their runs; ``wake`` the workers."""
        self._publish(changed.events)
        if finished:
            self.flow.observe(changed.jobs)
        if wake:
            self.notifier().notify()
        if prints is not None:
            await self._signatures().record(prints, changed)
        if finished and any(j.run_id is not None for j in changed.jobs):
            await self._runs().ended(changed.jobs)
            # A graph node the transaction cancelled and then queued again under its failure policy: its
            # run no longer counts the outcome it had.
            if revived := [j for j in changed.jobs if j.graph_id is not None and not j.terminal]:
                await self._runs().reopened(revived)
        if finished and any(j.graph_id is not None and j.terminal for j in changed.jobs):
            await self._graphs().ended(changed.jobs)
