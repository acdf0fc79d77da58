"""Graphs of jobs as a service of the engine (``engine.graphs``): submit, read, cancel, retry, and the
bookkeeping as their nodes end. Usage::

    handle = await engine.graphs.submit(chord([square.s(i) for i in range(100)], total.s()))
    status = await handle.wait(timeout=60)
    print(status.state, status.done, status.total)

How a graph moves (:mod:`jobengine.core.graphs`): its edges are its nodes' ``depends_on``, so the store
starts a node when its parents succeeded and cancels it when one ended dead or cancelled, and queues again
the nodes a failure policy lets run (``continue``, ``always``), all in the transaction that ended the
parent. A node adds nodes to its graph with its completion (:meth:`Graphs.expand`). As nodes end
(:meth:`Graphs.ended`, called by the engine's transitions), the service runs what a retry of the graph
waits to run (and anything the store left), and writes the graph's outcome with its ``graph.*`` event
once every node ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from jobengine.core import codec
from jobengine.core.graphs import (
    ENDED,
    GRAPH_CANCELLED,
    GRAPH_COMPLETED,
    GRAPH_FAILED,
    MAX_PARENT_RESULTS,
    GraphSpec,
    GraphState,
    GraphStatus,
    check_added,
    derive,
    settle,
)
from jobengine.core.ids import GraphId, IdKind, JobId
from jobengine.core.models import Changed, Completion, Event, Job, Json, NewEvent, NewJob
from jobengine.core.states import JobState
from jobengine.errors import IllegalState, InvalidJob, NotFound, ResultsTooLarge
from jobengine.ports.ids import resolve_id

if TYPE_CHECKING:
    from jobengine.core.clock import Clock
    from jobengine.engine.canvas import Graph, TaskCall
    from jobengine.engine.transitions import RunHooks
    from jobengine.middleware import Traces
    from jobengine.ports.graphs import GraphRow, GraphStore
    from jobengine.ports.store import Store

_OUTCOME_EVENTS = {
    GraphState.SUCCEEDED: GRAPH_COMPLETED,
    GraphState.FAILED: GRAPH_FAILED,
    GraphState.CANCELLED: GRAPH_CANCELLED,
}
#: Seconds between reads while waiting for a graph to end (another process may run its nodes).
_WAIT_POLL = 0.2


def _status(row: GraphRow) -> GraphStatus:
    record, counts, progress_sum, started = row
    state, done = derive(record, counts, progress_sum)
    if record.state is not None:
        state = record.state
    elif state in ENDED:
        # Every node ended, but the outcome is not written yet: a node may still run again (a policy, a
        # retry). It is written by the process that saw the last node end (or by the next read).
        state = GraphState.RUNNING
    total = record.total
    progress = (done + progress_sum) / total if total else 1.0
    return GraphStatus(
        id=record.id, tenant=record.tenant, name=record.name, state=state, total=total, done=done,
        progress=min(1.0, progress), created_at=record.created_at, updated_at=record.updated_at,
        started_at=started, completed_at=record.finished_at if state in ENDED else None, counts=counts,
    )  # fmt: skip


class GraphHandle:
    """A submitted graph: its ``id``, and its status, wait, cancel and retry. Usage::

    handle = await engine.graphs.submit(chain(fetch.s(url), parse.s()))
    status = await handle.wait(timeout=60)     # a GraphStatus once every node ended
    await handle.retry()                       # runs again only the nodes that failed or were cancelled
    """

    __slots__ = ("_graphs", "id", "tenant")

    def __init__(self, graphs: Graphs, graph_id: GraphId, tenant: str) -> None:
        self._graphs = graphs
        self.id = graph_id
        self.tenant = tenant

    def __repr__(self) -> str:
        return f"GraphHandle(id={self.id!r})"

    async def status(self, *, nodes: bool = False) -> GraphStatus:
        """The graph as it is now (``nodes``: with each node and its job)."""
        return await self._graphs.get(self.id, self.tenant, nodes=nodes)

    async def progress(self) -> float:
        """Nodes ended of the total, running nodes' phases counted in (0..1)."""
        return (await self.status()).progress

    async def wait(self, timeout: float = 30.0) -> GraphStatus:
        """The graph once every node ended (succeeded, failed or cancelled); TimeoutError after ``timeout``."""
        return await self._graphs.wait(self.id, timeout, self.tenant)

    async def cancel(self) -> GraphStatus:
        """Cancel the graph (:meth:`Graphs.cancel`)."""
        return await self._graphs.cancel(self.id, self.tenant)

    async def retry(self) -> GraphStatus:
        """Run its dead and cancelled nodes again (:meth:`Graphs.retry`)."""
        return await self._graphs.retry(self.id, self.tenant)

    async def results(self) -> dict[str, Json]:
        """The results of the nodes that succeeded, by node name."""
        status = await self._graphs.get(self.id, self.tenant, nodes=True)
        return {n.name: n.job.result for n in status.nodes if n.job.final_state is JobState.SUCCEEDED}


class Graphs:
    """The graphs of an engine (``engine.graphs``). ``new_job`` builds a node's job with its task's
    defaults, ``prepare`` runs every enqueue's checks on the node jobs (unknown tasks, payloads, flow
    control) and gives their phases; ``published`` puts events on the bus; ``jobs_created`` wakes
    workers (and publishes to a broker) for jobs written or queued again here; ``runs`` gives the run
    hooks told of the nodes that end or run again here (those of a graph a schedule fired); ``traces`` the
    engine's tracing middleware, if any, under whose graph span a new graph's nodes are enqueued."""

    def __init__(
        self,
        store: Store,
        graphs: GraphStore,
        clock: Clock,
        *,
        new_job: Callable[..., NewJob],
        prepare: Callable[[Sequence[NewJob]], Awaitable[tuple[Sequence[NewJob], list[tuple[str, ...]]]]],
        published: Callable[[Sequence[Event]], None],
        jobs_created: Callable[[Sequence[Job]], Awaitable[None]],
        runs: Callable[[], RunHooks] | None = None,
        traces: Callable[[], Traces | None] = lambda: None,
    ) -> None:
        self.store = store
        self.repo = graphs
        self.clock = clock
        self._new_job = new_job
        self._prepare = prepare
        self._published = published
        self._jobs_created = jobs_created
        self._runs = runs
        self._traces = traces

    # -- submit -------------------------------------------------------------------------------------
    def spec(self, graph: Graph, *, tenant: str = "default", name: str | None = None) -> GraphSpec:
        """The graph as it would be stored (validated: names, edges, cycles, size)."""

        def make(sig: TaskCall) -> NewJob:
            return self._new_job(
                sig.task, sig.payload, queue=sig.queue, priority=sig.priority, max_attempts=sig.max_attempts,
                timeout=sig.timeout, tenant=tenant,
            )  # fmt: skip

        return GraphSpec(name or graph.name, tenant, graph.node_specs(make))

    async def submit(self, graph: Graph, *, tenant: str = "default", name: str | None = None) -> GraphHandle:
        """Store the graph and every node job in one transaction (none of it on any error) and return its
        handle. InvalidJob naming the field for a bad graph (a cycle, an unknown node, too many nodes), or
        what an enqueue raises for a node's job (an unknown task, a bad payload, a full queue). Usage::

            handle = await engine.graphs.submit(chain(a.s(1), b.s()), tenant="acme")
        """
        return await self.submit_spec(self.spec(graph, tenant=tenant, name=name))

    async def submit_spec(self, spec: GraphSpec) -> GraphHandle:
        """:meth:`submit` for a graph already built as a :class:`GraphSpec` (the HTTP API's)."""
        jobs, phases = await self._prepare(self._traced(spec.jobs(), spec))
        inserted = await self.repo.insert_graph(spec, jobs, phases, self.clock.now())
        self._published(inserted.events)
        await self._jobs_created([j for j in inserted.jobs if j.state is JobState.QUEUED])
        return GraphHandle(self, spec.id, spec.tenant)

    def _traced(self, jobs: list[NewJob], spec: GraphSpec) -> list[NewJob]:
        """With tracing on, every node job carries the traceparent of the graph's span, so each node's
        enqueue span is its child and the graph is one trace (else each node would start its own when no
        span is current)."""
        traces = self._traces()
        parent = traces.graph_trace(spec.name, spec.id, spec.tenant) if traces is not None else None
        return [replace(j, trace=j.trace or parent) for j in jobs] if parent is not None else jobs

    # -- reads --------------------------------------------------------------------------------------
    async def get(self, graph_id: str, tenant: str | None = None, *, nodes: bool = False) -> GraphStatus:
        """The graph (of ``tenant``) by its id or a unique prefix of it; NotFound if there is none,
        AmbiguousId when several graphs start with the prefix."""
        graph_id = await resolve_id(self.store, IdKind.GRAPH, graph_id, tenant)
        rows = await self.repo.get_graphs([GraphId(graph_id)], tenant)
        if not rows:
            raise NotFound("graph", graph_id)
        record, counts, progress_sum, _ = rows[0]
        if record.state is None and derive(record, counts, progress_sum)[0] in ENDED:
            # The process that saw its last node end may have died before it wrote the outcome.
            await self._advance(record.id, broken=True)
            rows = await self.repo.get_graphs([record.id], tenant) or rows
        status = _status(rows[0])
        if nodes:
            status = replace(status, nodes=tuple(await self.repo.nodes(status.id)))
        return status

    def handle(self, graph_id: str, tenant: str = "default") -> GraphHandle:
        """The handle of a graph submitted before (nothing is read until it is used)."""
        return GraphHandle(self, GraphId(graph_id), tenant)

    async def list(self, tenant: str | None = None, limit: int = 50, before: str | None = None) -> list[GraphStatus]:
        """Graphs newest first (``before``: the id after which the next page starts)."""
        return [_status(r) for r in await self.repo.list_graphs(tenant, limit, before)]

    async def counts(self) -> dict[GraphState, int]:
        """Graphs of every tenant by state, every state present (for ``/metrics``)."""
        return await self.repo.count_graphs()

    async def wait(self, graph_id: str, timeout: float = 30.0, tenant: str | None = None) -> GraphStatus:
        """The graph once it ended; TimeoutError after ``timeout`` seconds (the graph goes on)."""
        async with asyncio.timeout(timeout):
            while True:
                status = await self.get(graph_id, tenant)
                if status.ended:
                    return status
                await asyncio.sleep(_WAIT_POLL)

    async def node_names(self, jobs: Sequence[Job]) -> dict[JobId, str]:
        """The node name of each graph node among ``jobs``; nothing is read when none is a node, so a
        batch of plain jobs costs no query."""
        ids = [JobId(j.id) for j in jobs if j.graph_id is not None]
        return await self.repo.node_names(ids) if ids else {}

    async def parent_results(self, job: Job) -> dict[str, Json]:
        """What node ``job`` receives: its parents' results by node name, read from the store (so a retry
        or another process sees them). ResultsTooLarge past :data:`MAX_PARENT_RESULTS` bytes."""
        if job.graph_id is None:
            return {}
        results = await self.repo.parent_results(JobId(job.id))
        size = len(codec.dumps(results, "results").encode())
        if size > MAX_PARENT_RESULTS:
            raise ResultsTooLarge(size, MAX_PARENT_RESULTS)
        return results

    async def expand(self, completion: Completion) -> Changed:
        """Complete the node of ``completion`` and store the nodes it adds (:attr:`Completion.nodes`) in
        one transaction (:meth:`GraphStore.expand`); their jobs pass every enqueue's checks first. Empty
        when the lease is no longer held. InvalidJob naming the field when they cannot be added (a node
        that is not in a graph, a name taken, ``after`` / ``before`` that do not fit, a limit), or what an
        enqueue raises for a node's job; nothing is stored then."""
        adding = (await self.repo.node_names([completion.job_id])).get(completion.job_id)
        if adding is None:
            raise InvalidJob("nodes", "only a node of a graph can add nodes to it")
        nodes = check_added(adding, completion.nodes)
        owner = await self.store.get_jobs([completion.job_id])
        if not owner:
            return Changed()
        ids: dict[str, str] = {adding: completion.job_id}
        # Added nodes join the adding node's trace (its enqueue span is their parent) when tracing is on.
        trace = owner[0].trace if self._traces() is not None else None
        built: list[NewJob] = []
        for n in nodes:
            job = self._new_job(
                n.task, n.payload, queue=n.queue, priority=n.priority, max_attempts=n.max_attempts,
                timeout=n.timeout, tenant=owner[0].tenant,
            )  # fmt: skip
            ids[n.name] = job.id
            built.append(replace(job, depends_on=tuple(JobId(ids[p]) for p in n.after), trace=trace))
        jobs, phases = await self._prepare(built)
        return await self.repo.expand(completion, adding, nodes, jobs, phases, self.clock.now())

    # -- actions ------------------------------------------------------------------------------------
    async def cancel(self, graph_id: str, tenant: str | None = None) -> GraphStatus:
        """Cancel the nodes that have not run yet and ask running ones to stop; the graph ends
        ``cancelled`` once they all ended. IllegalState for a graph that already ended."""
        status = await self.get(graph_id, tenant)
        if status.ended:
            raise IllegalState(f"graph {graph_id} already {status.state.value}; nothing to cancel")
        now = self.clock.now()
        await self.repo.mark_cancelled(status.id, now)
        open_nodes = [n.job.id for n in await self.repo.nodes(status.id) if not n.job.terminal]
        changed = await self.store.cancel_jobs(open_nodes, "graph cancelled", now, tenant)
        self._published(changed.events)
        await self._run_hook("ended", changed.jobs)
        await self.ended(changed.jobs)
        return await self.get(status.id, tenant)

    async def retry(self, graph_id: str, tenant: str | None = None) -> GraphStatus:
        """Run again the nodes that ended dead or cancelled, each once its parents succeeded (again); the
        nodes that succeeded keep their results. IllegalState unless the graph ended failed or cancelled."""
        status = await self.get(graph_id, tenant)
        if status.state not in (GraphState.FAILED, GraphState.CANCELLED):
            raise IllegalState(
                f"graph {graph_id} is {status.state.value}; only a failed or cancelled graph can be retried"
            )
        nodes = await self.repo.nodes(status.id)
        again = [n.job.id for n in nodes if n.job.final_state in (JobState.DEAD, JobState.CANCELLED)]
        await self.repo.mark_pending(status.id, again, True, self.clock.now())
        await self._advance(status.id, broken=True)
        return await self.get(status.id, tenant)

    async def reopened(self, jobs: Sequence[Job]) -> None:
        """Nodes among ``jobs`` were queued again one by one (``engine.retry``): their graphs go on, and
        their outcome is written again when every node ended."""
        for graph_id in {j.graph_id for j in jobs if j.graph_id is not None}:
            await self.repo.mark_pending(graph_id, [], True, self.clock.now())

    async def _run_hook(self, hook: Literal["ended", "reopened"], jobs: Sequence[Job]) -> None:
        """Nodes of a graph a schedule fired changed here, not through the engine's transitions: their run
        counts them (a graph without a run costs nothing)."""
        if self._runs is None or not any(j.run_id is not None for j in jobs):
            return
        runs = self._runs()
        await (runs.ended(jobs) if hook == "ended" else runs.reopened(jobs))

    # -- as nodes end -------------------------------------------------------------------------------
    async def ended(self, jobs: Sequence[Job]) -> None:
        """Nodes among ``jobs`` ended: run again what a policy or a retry lets run, and write the outcome
        of each graph whose nodes have all ended (with its ``graph.*`` event, once)."""
        touched: dict[GraphId, bool] = {}
        for job in jobs:
            if job.graph_id is not None and job.terminal:
                broke = job.final_state is not JobState.SUCCEEDED
                touched[job.graph_id] = touched.get(job.graph_id, False) or broke
        for graph_id, broke in touched.items():
            await self._advance(graph_id, broken=broke)

    async def _advance(self, graph_id: GraphId, *, broken: bool) -> None:
        unfinished, has_broken = await self.repo.probe(graph_id)
        if broken or has_broken:
            rows = await self.repo.get_graphs([graph_id], None)
            if not rows:
                return
            revive, drop = settle(await self.repo.nodes(graph_id), rows[0][0].cancelled)
            now = self.clock.now()
            if drop:
                await self.repo.mark_pending(graph_id, [JobId(n.job.id) for n in drop], False, now)
            if revive:
                # Queued first, then no longer waiting: the outcome is written only when no node is either.
                ids = [JobId(n.job.id) for n in revive]
                changed = await self.store.retry_jobs(ids, now)
                self._published(changed.events)
                await self._run_hook("reopened", changed.jobs)
                await self.repo.mark_pending(graph_id, ids, False, now)
                await self._jobs_created(changed.jobs)
                unfinished = unfinished or bool(changed.jobs)
        if not unfinished:
            await self._finish(graph_id)

    async def _finish(self, graph_id: GraphId) -> None:
        rows = await self.repo.get_graphs([graph_id], None)
        if not rows or rows[0][0].state is not None:
            return
        record, counts, progress_sum, _ = rows[0]
        state, done = derive(record, counts, progress_sum)
        if state not in ENDED:
            return
        now = self.clock.now()
        data: dict[str, Any] = {
            "graph_id": record.id, "name": record.name, "state": state.value, "done": done, "total": record.total,
            "duration": max(0.0, now - record.created_at),
        }  # fmt: skip
        event = NewEvent(_OUTCOME_EVENTS[state], record.tenant, None, None, None, data)
        self._published(await self.repo.finish(graph_id, state, now, event))
