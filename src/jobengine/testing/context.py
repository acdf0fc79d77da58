"""A context for calling a task function directly in a unit test: no engine, no store, no worker.

What the task reports is recorded on the context instead of being stored (``progress_reports``,
``checkpoints``), and what it reads is given to :func:`context` (the payload, the attempt, earlier phases'
results, the checkpoint an earlier attempt saved). One context serves async and sync tasks: its
``save_checkpoint`` records at once and may be awaited or not.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import Any

from jobengine.core.bounds import check_json
from jobengine.core.ids import JobId
from jobengine.core.models import Job, Json, Phase, PhaseState
from jobengine.core.states import JobState
from jobengine.errors import InvalidJob
from jobengine.worker.context import JobContext, SharedState, SyncJobContext


class _Stored:
    """What ``save_checkpoint`` returns: already done, so an async task awaits it and a sync one ignores it
    (a coroutine left unawaited would warn)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


class TestContext(SyncJobContext):
    """A :class:`~jobengine.JobContext` (and :class:`~jobengine.SyncJobContext`) that records what a task
    reports: ``progress_reports`` (each ``(fraction, message)``, as stored) and ``checkpoints`` (each saved
    value, in order; ``ctx.checkpoint`` is the last). :meth:`cancel` makes ``ctx.cancelled`` true, as a
    cancel request does. Build one with :func:`context`. Usage::

        ctx = testing.context(results={"extract": {"rows": 15}}, phase="transform")
        assert transform(ctx, factor=3) == 45
        assert ctx.progress_reports == [(1.0, "done")]
    """

    __test__ = False  # a class named Test* that pytest must not collect from a user's test module

    def __init__(self, job: Job, results: Mapping[str, Json], index: int) -> None:
        shared = SharedState(job, self._persisted)
        shared.results = dict(results)
        shared.index = index
        JobContext.__init__(self, shared)  # no loop: nothing here waits for a store
        self.progress_reports: list[tuple[float, str | None]] = []
        self.checkpoints: list[Json] = []

    async def _persisted(self, shared: SharedState, event: str | None) -> None:
        """The store a worker would write to: nothing to do, the phases are on the context already."""

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report progress as a worker's context does, and record it in ``progress_reports``."""
        super().progress(fraction, message)
        self.progress_reports.append((self._s.phases[self._s.index].progress, message))

    def save_checkpoint(self, data: Json) -> Any:
        """Record ``data`` as the checkpoint (``ctx.checkpoint`` from now on); InvalidJob naming
        ``checkpoint`` if a backend could not store it. Returns an awaitable, for an async task's ``await``."""
        check_json("checkpoint", data)
        if not self._s.phases:  # a plain task: its implicit phase is created on first use, as by a worker
            self._s.phases.append(Phase(name="run", state=PhaseState.RUNNING))
        self._s.phases[self._s.index] = replace(self._s.phases[self._s.index], checkpoint=data)
        self.checkpoints.append(data)
        return _Stored()

    def cancel(self) -> None:
        """Ask the task to stop, as a cancel request does: ``ctx.cancelled`` is True and
        ``ctx.raise_if_cancelled()`` raises Cancelled from now on."""
        self._s.cancel.set()


def context(
    payload: Json = None,
    *,
    results: Mapping[str, Json] | None = None,
    phase: str | None = None,
    checkpoint: Json = None,
    attempt: int = 1,
    task: str = "task",
    job_id: str = "test-job",
) -> TestContext:
    """A context to pass to a task function called directly. ``payload``: ``ctx.payload`` (a task that
    takes named arguments gets them from the call instead); ``results``: earlier phases' results by name
    (``ctx.results``); ``phase``: the phase running (``ctx.phase``; the earlier ones are those of
    ``results``); ``checkpoint``: what an earlier attempt of this phase saved (``ctx.checkpoint``);
    ``attempt``: ``ctx.attempt``. Usage::

        from jobengine import testing

        ctx = testing.context()
        assert await send_welcome(ctx, Customer(email="ada@example.com", name="Ada")) == "..."
        assert ctx.progress_reports == [(0.5, "rendering")]

        ctx = testing.context(checkpoint={"downloaded": True}, attempt=2)   # resuming after a crash
    """
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise InvalidJob("attempt", f"a positive whole number, got {attempt!r}")
    check_json("payload", payload)
    check_json("checkpoint", checkpoint)
    earlier = dict(results or {})
    check_json("results", earlier)
    phases = [Phase(name, PhaseState.SUCCEEDED, 1.0, result) for name, result in earlier.items()]
    if phase is not None or checkpoint is not None or phases:
        phases.append(Phase(phase or "run", PhaseState.RUNNING, checkpoint=checkpoint))
    now = time.time()
    job = Job(
        JobId(job_id), "default", "default", task, payload, 0, now, JobState.RUNNING, attempt,
        max(attempt, 3), now, now, phases=tuple(phases), started_at=now,
    )  # fmt: skip
    return TestContext(job, earlier, max(len(phases) - 1, 0))
