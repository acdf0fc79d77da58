"""The context a task receives: its job, its phase, progress, checkpoints and cancellation.

Async tasks get a :class:`JobContext`; sync tasks, which run in threads, get a :class:`SyncJobContext`
whose ``save_checkpoint`` blocks until the checkpoint is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from jobengine.core.bounds import check_json, check_text
from jobengine.core.graphs import MAX_ADDED, policy_of
from jobengine.core.models import AddedNode, Job, Json, Phase, PhaseState, check_name
from jobengine.core.run_modes import mode_of
from jobengine.errors import Cancelled, InvalidJob


class _Flag:
    """Set once, read from the job's thread or task: a plain attribute does (its reads and writes are
    atomic), and costs nothing next to a threading.Event, which builds a Condition and a Lock per job."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class SharedState:
    """State shared by a job's context and the runtime that drives it."""

    def __init__(
        self,
        job: Job,
        persist: Callable[[SharedState, str | None], Awaitable[None]],
        parents: Callable[[Job], Awaitable[dict[str, Json]]] | None = None,
    ) -> None:
        self.job = job
        self.parents = parents
        self.phases: list[Phase] = list(job.phases)
        self.index = 0
        self.results: dict[str, Json] = {}
        self.dirty = False
        self.cancel = _Flag()
        self.persist = persist
        #: The nodes this attempt adds to its graph, sent with its completion (:class:`GraphAdder`).
        self.added: list[AddedNode] = []


class _Call(Protocol):
    """A task call (``task.s(...)``, :class:`jobengine.engine.canvas.TaskCall`) as a node is built from it."""

    @property
    def task(self) -> str: ...

    @property
    def payload(self) -> Json: ...

    @property
    def queue(self) -> str | None: ...

    @property
    def priority(self) -> int | None: ...

    @property
    def max_attempts(self) -> int | None: ...

    @property
    def timeout(self) -> float | None: ...


class GraphAdder:
    """``ctx.graph`` of a graph node: the nodes it adds to its own graph (dynamic fan-out). They are stored
    in the transaction that completes this node, so a node that fails or whose worker dies adds nothing,
    and a retry adds them again when it succeeds. Usage::

        @engine.task
        async def split(ctx: JobContext, path: str) -> int:
            parts = list_parts(path)
            for i, part in enumerate(parts):
                ctx.graph.add(work.s(part), name=f"work-{i}", before=["join"])
            return len(parts)

    ``join``, declared with ``after=["split"]`` when the graph was built, then waits for every ``work-*`` node
    too and receives their results by name in ``ctx.parent_results()``.
    """

    __slots__ = ("_s",)

    def __init__(self, shared: SharedState) -> None:
        self._s = shared

    def add(
        self,
        sig: _Call,
        *,
        name: str | None = None,
        after: Iterable[str] = (),
        before: Iterable[str] = (),
        policy: str = "cancel",
    ) -> str:
        """Add a node running ``sig`` when this node completes; return its name (``name``, else the task's
        name and a number). ``after``: the nodes it runs after, this one or nodes added before it (default:
        this one); ``before``: nodes of the graph waiting on this one that must also wait on it. InvalidJob
        naming the field at once for what can be checked here (a name, a policy, the payload, the
        :data:`~jobengine.core.graphs.MAX_ADDED` limit); the rest (``after``, a name already in the graph, a
        ``before`` node, an unknown task) fails the completion instead: the node goes dead with that error."""
        if self._s.job.graph_id is None:
            raise InvalidJob("nodes", "only a node of a graph can add nodes to it")
        if len(self._s.added) >= MAX_ADDED:
            raise InvalidJob("nodes", f"a node adds at most {MAX_ADDED} nodes at once")
        taken = {n.name for n in self._s.added}
        if name is None:
            name = f"{sig.task}-{len(self._s.added) + 1}"
        check_name("nodes.name", name)
        if name in taken:
            raise InvalidJob("nodes", f"node {name!r} is named twice")
        after = tuple(after)
        check_json("payload", sig.payload)
        self._s.added.append(
            AddedNode(
                name, sig.task, sig.payload, after, tuple(before), policy_of(policy).value, sig.queue, sig.priority,
                sig.max_attempts, sig.timeout,
            )
        )  # fmt: skip
        return name


class JobContext:
    """What a running job knows and can do: its ``job``, ``payload`` and ``attempt``, the running
    ``phase``, earlier phases' ``results``, its ``checkpoint``; report ``progress``, ``save_checkpoint``,
    see whether it was ``cancelled``. A task receives it by declaring a parameter of this type (first,
    for the type checker). Usage::

        @engine.task
        async def import_file(ctx: JobContext, url: str) -> int:
            ctx.progress(0.1, "downloading")
            ctx.raise_if_cancelled()
            await ctx.save_checkpoint({"downloaded": True})   # ctx.checkpoint after a crash
            return 42
    """

    def __init__(self, shared: SharedState) -> None:
        self._s = shared

    @property
    def job(self) -> Job:
        return self._s.job

    @property
    def job_id(self) -> str:
        return self._s.job.id

    @property
    def payload(self) -> Any:
        return self._s.job.payload

    @property
    def attempt(self) -> int:
        return self._s.job.attempt

    @property
    def mode(self) -> str:
        """``"full"``, ``"incremental"`` or ``"simulate"``: the mode of the run request that made this job
        (``"full"`` for any other job). The contract: when it is ``"simulate"`` the task computes and returns
        its result but causes no effect (no writes elsewhere, no messages sent); the engine helps by sending
        no webhook for the run and moving no cursor. Usage::

            @engine.task
            async def score(ctx: JobContext, items: list[str], **_: object) -> dict[str, int]:
                scores = {i: len(i) for i in items}
                if ctx.mode != "simulate":
                    await save_scores(scores)  # the effect a dry run must not have
                return scores
        """
        return mode_of(self._s.job).value

    @property
    def phase(self) -> str:
        """The name of the phase running now."""
        return self._s.phases[self._s.index].name if self._s.phases else "run"

    @property
    def results(self) -> Mapping[str, Json]:
        """Results of the phases that already succeeded (in this attempt or an earlier one)."""
        return self._s.results

    async def parent_results(self) -> Mapping[str, Json]:
        """The results of this graph node's parents that succeeded, by node name (empty for a job that is
        not a node), read from the store when asked, so a retry or another process sees them too.
        ResultsTooLarge (the job goes dead) past the size a node may receive. Usage::

            @engine.task
            async def total(ctx: JobContext) -> int:
                return sum((await ctx.parent_results()).values())
        """
        if self._s.job.graph_id is None or self._s.parents is None:
            return {}
        return await self._s.parents(self._s.job)

    @property
    def graph(self) -> GraphAdder:
        """Nodes this graph node adds to its graph when it completes (:class:`GraphAdder`)."""
        return GraphAdder(self._s)

    @property
    def checkpoint(self) -> Json:
        """The checkpoint this phase saved before the process running it died (None if none)."""
        return self._s.phases[self._s.index].checkpoint if self._s.phases else None

    @property
    def cancelled(self) -> bool:
        return self._s.cancel.is_set()

    def raise_if_cancelled(self) -> None:
        if self._s.cancel.is_set():
            raise Cancelled(f"job {self.job_id} was cancelled")

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report progress of the current phase (0..1). Stored with the next heartbeat, not at once."""
        if message is not None:
            check_text("message", message)
        self._ensure_phase()
        p = self._s.phases[self._s.index]
        self._s.phases[self._s.index] = replace(p, progress=max(0.0, min(1.0, float(fraction))), message=message)
        self._s.dirty = True

    async def save_checkpoint(self, data: Json) -> None:
        """Store ``data`` now; if the process dies in this phase, the next attempt finds it in
        ``ctx.checkpoint``. InvalidJob (naming ``checkpoint``) if a backend cannot store ``data``."""
        check_json("checkpoint", data)
        self._ensure_phase()
        p = self._s.phases[self._s.index]
        self._s.phases[self._s.index] = replace(p, checkpoint=data)
        await self._s.persist(self._s, None)

    def _ensure_phase(self) -> None:
        if not self._s.phases:  # a plain task: its implicit phase is created on first use
            self._s.phases.append(Phase(name="run", state=PhaseState.RUNNING))


class SyncJobContext(JobContext):
    """The context of a sync task (a plain ``def``, run in a thread): ``save_checkpoint`` blocks until the
    checkpoint is stored. Usage::

        @engine.task
        def resize(ctx: SyncJobContext, path: str) -> str:
            ctx.save_checkpoint({"path": path})
            return path
    """

    def __init__(self, shared: SharedState, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(shared)
        self._loop = loop

    def save_checkpoint(self, data: Json) -> None:  # type: ignore[override]
        fut = asyncio.run_coroutine_threadsafe(JobContext.save_checkpoint(self, data), self._loop)
        fut.result()

    def parent_results(self) -> Mapping[str, Json]:  # type: ignore[override]
        """:meth:`JobContext.parent_results`, blocking until they are read."""
        return asyncio.run_coroutine_threadsafe(JobContext.parent_results(self), self._loop).result()
