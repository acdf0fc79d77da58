"""Simulations of a task pack version that awaits approval, so a reviewer approves what they saw.

:meth:`PackRuns.simulate` starts a ``simulate`` run of the pending version's task over the inputs of the
newest completed full run of that task (which only an approved version can have made: a pack's task is one
stream whatever its version, :func:`jobengine.core.run_requests.stream_task`): the same items, source,
environment, segment size, queue and priority. Its jobs see ``ctx.mode == "simulate"``, send no webhooks and
move no cursor, and its diff is against that full run (``base_run_id``). The version's history records each
simulation (``pack.simulated``); :meth:`PackRuns.review` answers the newest one with its diff, what the
approval page and ``jobengine pack approve`` show. Usage::

    run = await engine.pack_runs.simulate("scores", "1.1.0", actor="key:ann")
    ...                                          # a worker loaded with pending versions runs it
    review = await engine.pack_runs.review("scores", "1.1.0")
    print(review.diff.counts if review.diff else review.hint)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from jobengine.core.models import Json
from jobengine.core.run_diff import ItemChange, RunDiff
from jobengine.core.run_requests import PriorityClass, RunMode, RunRequest, request_of
from jobengine.core.runs import Run
from jobengine.errors import IllegalState, InvalidJob, NotFound
from jobengine.packs.errors import PackConflict
from jobengine.packs.registry import PackRegistry
from jobengine.ports.packs import PackStatus
from jobengine.scheduler.runs import Runs

#: How many changed items a review lists (the counts are always whole).
REVIEW_ITEMS: Final = 50


@dataclass(frozen=True, slots=True)
class PackReview:
    """What a reviewer sees before approving ``name@version``: its newest simulate ``run`` (None: never
    simulated), the run's ``diff`` once it ended (None before), and ``hint``, what to do next, in words."""

    name: str
    version: str
    run: Run | None
    diff: RunDiff | None
    hint: str

    @property
    def command(self) -> str:
        """The command that simulates the version."""
        return f"jobengine pack simulate {self.name}@{self.version}"

    def changed(self, limit: int = REVIEW_ITEMS) -> list[dict[str, Json]]:
        """The first ``limit`` items whose result is not the same (changed, new, gone), results side by side."""
        if self.diff is None:
            return []
        return [e.to_json() for e in self.diff.entries if e.change is not ItemChange.SAME][:limit]

    def to_json(self, limit: int = REVIEW_ITEMS) -> dict[str, Json]:
        diff = self.diff
        return {
            "name": self.name, "version": self.version, "hint": self.hint, "command": self.command,
            "run_id": None if self.run is None else self.run.id,
            "state": None if self.run is None else self.run.state.value,
            "base_run_id": None if diff is None else diff.base_run_id,
            "counts": None if diff is None else dict(diff.counts),
            "unfinished": None if diff is None else diff.unfinished,
            "entries": self.changed(limit), "limit": limit,
        }  # fmt: skip


class PackRuns:
    """Simulations of pending pack versions over the engine's runs and pack registry."""

    def __init__(self, registry: Callable[[], PackRegistry], runs: Runs) -> None:
        self._registry = registry
        self._runs = runs

    async def simulate(
        self,
        name: str,
        version: str,
        *,
        task: str | None = None,
        source: str = "default",
        tenant: str = "default",
        actor: str = "system",
    ) -> Run:
        """A simulate run of ``name@version`` (pending approval) over the inputs of the newest completed full
        run of its ``task`` (may be left out when the pack has one task) from ``source``. Raises NotFound for
        an unknown version, PackConflict (409) for one that is not pending, InvalidJob (422, ``task``) for a
        task the version lacks, IllegalState (409) when no full run exists to take inputs from."""
        registry = self._registry()
        found = await registry.get(name, version)
        label = f"{found.name}@{found.version}"
        if found.status is not PackStatus.PENDING:
            raise PackConflict(f"{label} is {found.status.value}; only a version awaiting approval is simulated")
        tasks = sorted(found.manifest.get("tasks", {}))
        if task is None:
            if len(tasks) != 1:
                raise InvalidJob("task", f"{label} has tasks {', '.join(tasks)}: name the one to simulate")
            task = tasks[0]
        elif task not in tasks:
            raise InvalidJob("task", f"{label} has no task {task!r} (it has: {', '.join(tasks)})")
        stream = RunRequest(task=f"{found.name}@{found.version}:{task}", source=source).stream
        base = await self._runs.last_full(stream, tenant)
        if base is None:
            raise IllegalState(f"{found.name}:{task} has no completed full run from source {source!r} to take "
                               "inputs from; run the approved version first")  # fmt: skip
        stored = request_of(base.trigger_data)
        environment = stored.get("environment")
        request = RunRequest(
            task=f"{found.name}@{found.version}:{task}", items=tuple(await self._runs.items(base.id, tenant)),
            version=found.version, mode=RunMode.SIMULATE, priority=PriorityClass(stored.get("priority", "normal")),
            source=source, environment=environment if isinstance(environment, dict) else {},
            segment_size=int(stored.get("segment_size") or 100),
            queue=stored["queue"] if isinstance(stored.get("queue"), str) else None,
            reason=f"simulation of {label} on the inputs of run {base.id}",
        )  # fmt: skip
        run = await self._runs.start(request, tenant=tenant, actor=actor, base_run_id=base.id)
        await registry.record_simulation(found, actor, run.id, base.id)
        return run

    async def review(self, name: str, version: str, tenant: str | None = None) -> PackReview:
        """The newest simulation of ``name@version`` and its diff (NotFound for an unknown version)."""
        registry = self._registry()
        found = await registry.get(name, version)
        command = f"jobengine pack simulate {found.name}@{found.version}"
        for run_id in reversed(await registry.simulations(found.name, found.version)):
            try:
                run = await self._runs.get(run_id, tenant)
            except NotFound:  # pruned by run retention, or another tenant's
                continue
            if not run.ended:
                hint = f"simulate run {run.id} is {run.state.value}; its diff is ready once it ended"
                return PackReview(found.name, found.version, run, None, hint)
            diff = await self._runs.diff(run.id, tenant)
            c = diff.counts
            hint = (f"simulate run {run.id} against run {diff.base_run_id}: {c['same']} same, {c['changed']} "
                    f"changed, {c['new']} new, {c['gone']} gone")  # fmt: skip
            if diff.unfinished:
                hint += f"; {diff.unfinished} items did not finish"
            return PackReview(found.name, found.version, run, diff, hint)
        hint = f"{found.name}@{found.version} has not been simulated; run: {command}"
        return PackReview(found.name, found.version, None, None, hint)
