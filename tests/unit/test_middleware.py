"""Middleware on `database: memory` (SQLite): the hooks around enqueueing and each attempt, their order, the
failure, retry and dead paths, and hooks that raise or hang, which never change or lose a job's outcome."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from jobengine import Middleware, NonRetryable
from jobengine.core.models import Job, Json, NewJob
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.errors import InvalidJob
from jobengine.middleware import MiddlewareChain
from jobengine.settings import Settings
from jobengine.worker import JobContext, SyncJobContext

FAST = RetryPolicy(base=0.01, cap=0.02)
Calls = list[tuple[str, ...]]


class Recorder(Middleware):
    """Records every hook as ``(name, hook, task, detail)``: plain methods."""

    def __init__(self, name: str, calls: Calls) -> None:
        self.name, self.calls = name, calls

    def before_enqueue(self, job: NewJob) -> None:
        self.calls.append((self.name, "before_enqueue", job.task))

    def after_enqueue(self, job: Job) -> None:
        self.calls.append((self.name, "after_enqueue", job.task, job.state.value))

    def before_run(self, job: Job) -> None:
        self.calls.append((self.name, "before_run", job.task, str(job.attempt)))

    def after_run(self, job: Job, result: Json) -> None:
        self.calls.append((self.name, "after_run", job.task, repr(result)))

    def on_failure(self, job: Job, error: BaseException) -> None:
        self.calls.append((self.name, "on_failure", job.task, str(error)))

    def on_retry(self, job: Job, error: BaseException, retry_at: float) -> None:
        self.calls.append((self.name, "on_retry", job.task, str(retry_at > job.created_at)))

    def on_dead(self, job: Job, error: BaseException) -> None:
        self.calls.append((self.name, "on_dead", job.task, str(error)))

    def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
        self.calls.append((self.name, "after_attempt", job.task, outcome, str(seconds >= 0)))


class AsyncRecorder(Middleware):
    """A recorder's hooks as ``async def`` (one awaits, so other jobs' hooks may run meanwhile), but not
    ``on_retry`` and ``on_dead``."""

    def __init__(self, name: str, calls: Calls) -> None:
        self.inner = Recorder(name, calls)

    async def before_enqueue(self, job: NewJob) -> None:
        self.inner.before_enqueue(job)

    async def after_enqueue(self, job: Job) -> None:
        self.inner.after_enqueue(job)

    async def before_run(self, job: Job) -> None:
        await asyncio.sleep(0)
        self.inner.before_run(job)

    async def after_run(self, job: Job, result: Json) -> None:
        self.inner.after_run(job, result)

    async def on_failure(self, job: Job, error: BaseException) -> None:
        self.inner.on_failure(job, error)

    async def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
        self.inner.after_attempt(job, outcome, seconds, error)


class Raising(Middleware):
    """Every hook but ``before_enqueue`` raises."""

    def after_enqueue(self, job: Job) -> None:
        raise RuntimeError("after_enqueue broke")

    def before_run(self, job: Job) -> None:
        raise RuntimeError("before_run broke")

    async def after_run(self, job: Job, result: Json) -> None:
        raise RuntimeError("after_run broke")

    def on_failure(self, job: Job, error: BaseException) -> None:
        raise RuntimeError("on_failure broke")

    def on_retry(self, job: Job, error: BaseException, retry_at: float) -> None:
        raise RuntimeError("on_retry broke")

    def on_dead(self, job: Job, error: BaseException) -> None:
        raise RuntimeError("on_dead broke")

    def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
        raise RuntimeError("after_attempt broke")


@pytest.fixture
def calls() -> Calls:
    return []


@pytest.fixture
async def engine(calls: Calls) -> AsyncIterator[Engine]:
    e = Engine(open_store("memory"), middleware=[Recorder("a", calls), AsyncRecorder("b", calls)])
    async with e:
        yield e


async def run_until_stopped(engine: Engine, *job_ids: str, **options: object) -> list[Job]:
    """Run a worker until the jobs are terminal, then stop it: a graceful stop waits for hooks in flight."""
    opts: dict[str, object] = {"concurrency": 4, "heartbeat_every": 0.05, "poll_interval": 0.05}
    opts.update(options)
    worker = engine.worker(**opts)
    task = asyncio.create_task(worker.run())
    try:
        return [await engine.wait_for(i, timeout=60) for i in job_ids]
    finally:
        worker.stop()
        async with asyncio.timeout(60):
            await task


def hooks_of(calls: Calls, name: str) -> list[tuple[str, ...]]:
    return [c[1:] for c in calls if c[0] == name]


async def test_every_hook_runs_in_the_order_given_around_an_async_task(engine: Engine, calls: Calls) -> None:
    @engine.task()
    async def greet(ctx: JobContext, name: str) -> str:
        calls.append(("task", "ran", name))
        return f"hello {name}"

    handle = await greet.enqueue("ada")
    [job] = await run_until_stopped(engine, handle.id)
    assert job.state is JobState.SUCCEEDED
    assert calls == [
        ("a", "before_enqueue", "greet"),
        ("b", "before_enqueue", "greet"),
        ("a", "after_enqueue", "greet", "queued"),
        ("b", "after_enqueue", "greet", "queued"),
        ("a", "before_run", "greet", "1"),
        ("b", "before_run", "greet", "1"),
        ("task", "ran", "ada"),
        ("a", "after_run", "greet", "'hello ada'"),
        ("b", "after_run", "greet", "'hello ada'"),
        ("a", "after_attempt", "greet", "succeeded", "True"),
        ("b", "after_attempt", "greet", "succeeded", "True"),
    ]


async def test_a_sync_task_in_a_thread_gets_the_same_hooks(engine: Engine, calls: Calls) -> None:
    @engine.task()
    def add(ctx: SyncJobContext, x: int, y: int) -> int:
        return x + y

    job = await engine.enqueue("add", {"x": 2, "y": 3})
    await run_until_stopped(engine, job.id)
    assert hooks_of(calls, "b") == [
        ("before_enqueue", "add"),
        ("after_enqueue", "add", "queued"),
        ("before_run", "add", "1"),
        ("after_run", "add", "5"),
        ("after_attempt", "add", "succeeded", "True"),
    ]


async def test_a_failing_task_is_retried_then_dead_with_its_hooks(engine: Engine, calls: Calls) -> None:
    @engine.task(max_attempts=2, retry=FAST)
    async def broken(ctx: JobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    job = await engine.enqueue("broken")
    [done] = await run_until_stopped(engine, job.id)
    assert done.state is JobState.DEAD
    assert hooks_of(calls, "a")[2:] == [
        ("before_run", "broken", "1"),
        ("on_failure", "broken", "attempt 1"),
        ("on_retry", "broken", "True"),
        ("after_attempt", "broken", "retry", "True"),
        ("before_run", "broken", "2"),
        ("on_failure", "broken", "attempt 2"),
        ("on_dead", "broken", "attempt 2"),
        ("after_attempt", "broken", "dead", "True"),
    ]
    # The async middleware (no on_retry / on_dead of its own) sees the same attempts in the same order.
    assert [c[0] for c in hooks_of(calls, "b")[2:]] == [
        "before_run",
        "on_failure",
        "after_attempt",
        "before_run",
        "on_failure",
        "after_attempt",
    ]


async def test_non_retryable_goes_to_on_dead_at_once(engine: Engine, calls: Calls) -> None:
    @engine.task(max_attempts=5)
    def hopeless(ctx: SyncJobContext) -> None:
        raise NonRetryable("bad input")

    job = await engine.enqueue("hopeless")
    await run_until_stopped(engine, job.id)
    assert hooks_of(calls, "a")[2:] == [
        ("before_run", "hopeless", "1"),
        ("on_failure", "hopeless", "bad input"),
        ("on_dead", "hopeless", "bad input"),
        ("after_attempt", "hopeless", "dead", "True"),
    ]


async def test_a_cancelled_job_is_no_failure(engine: Engine, calls: Calls) -> None:
    started = asyncio.Event()

    @engine.task()
    async def forever(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    worker = engine.worker(heartbeat_every=0.05, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    job = await engine.enqueue("forever")
    async with asyncio.timeout(60):
        await started.wait()
    await engine.cancel(job.id)
    assert (await engine.wait_for(job.id, timeout=60)).state is JobState.CANCELLED
    worker.stop()
    async with asyncio.timeout(60):
        await task
    assert [c[0] for c in hooks_of(calls, "a")[2:]] == ["before_run", "after_attempt"]
    assert hooks_of(calls, "a")[-1][2] == "cancelled"


async def test_hooks_that_raise_are_logged_and_change_no_outcome(caplog: pytest.LogCaptureFixture) -> None:
    calls: Calls = []
    engine = Engine(open_store("memory"), middleware=[Raising(), Recorder("after", calls)])

    @engine.task()
    async def fine(ctx: JobContext) -> int:
        return 42

    @engine.task(max_attempts=2, retry=FAST)
    def broken(ctx: SyncJobContext) -> None:
        raise ValueError("task broke")

    async with engine:
        with caplog.at_level(logging.ERROR, logger="jobengine.middleware"):
            ok = await fine.enqueue()  # after_enqueue raised: the job is stored all the same
            bad = await broken.enqueue()
            done = await run_until_stopped(engine, ok.id, bad.id)
    assert [(j.state, j.result, j.attempt) for j in done] == [(JobState.SUCCEEDED, 42, 1), (JobState.DEAD, None, 2)]
    assert [e.message for e in done[1].errors] == ["task broke", "task broke"]
    # The middleware after the raising one still saw everything.
    assert [c[1] for c in calls if c[2] == "broken"] == [
        "before_enqueue", "after_enqueue", "before_run", "on_failure", "on_retry", "after_attempt",
        "before_run", "on_failure", "on_dead", "after_attempt",
    ]  # fmt: skip
    logged = [r for r in caplog.records if r.name == "jobengine.middleware"]
    assert {r.getMessage() for r in logged} >= {
        f"middleware Raising.{hook} raised; ignored"
        for hook in ("after_enqueue", "before_run", "after_run", "on_failure", "on_retry", "on_dead", "after_attempt")
    }
    assert all(r.exc_info for r in logged)


async def test_a_before_enqueue_hook_that_raises_refuses_the_whole_batch() -> None:
    class NoPriorityJobs(Middleware):
        async def before_enqueue(self, job: NewJob) -> None:
            if job.priority > 5:
                raise InvalidJob("priority", "this app keeps priorities at 5 or below")

    engine = Engine(open_store("memory"), middleware=[NoPriorityJobs()])
    async with engine:
        with pytest.raises(InvalidJob, match="priority"):
            await engine.enqueue_many([engine.new_job("a", priority=1), engine.new_job("b", priority=9)])
        assert await engine.list_jobs() == []
        assert (await engine.enqueue("a", priority=5)).priority == 5


async def test_a_before_enqueue_hook_may_return_the_job_to_store_instead() -> None:
    """Each hook sees what the one before returned; None keeps the job as it was."""
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    class Traced(Middleware):
        def before_enqueue(self, job: NewJob) -> NewJob:
            return replace(job, trace=trace)

    class Lowered(Middleware):
        async def before_enqueue(self, job: NewJob) -> NewJob | None:
            return replace(job, priority=0) if job.trace == trace else None

    engine = Engine(open_store("memory"), middleware=[Traced(), Lowered(), Recorder("r", [])])
    async with engine:
        (job,) = await engine.enqueue_many([engine.new_job("a", priority=9)])
        assert (job.trace, job.priority) == (trace, 0)
        assert await engine.get_jobs([job.id]) == [job]


async def stored(settings: Settings) -> list[Job]:
    async with Engine.from_settings(settings) as engine:
        return await engine.list_jobs()


def test_enqueue_sync_runs_the_enqueue_hooks(tmp_path: Path) -> None:
    calls: Calls = []

    class Refuse(Middleware):
        def before_enqueue(self, job: NewJob) -> None:
            if job.task == "forbidden":
                raise PermissionError("forbidden is off limits")

    settings = Settings(database=str(tmp_path / "jobs.db"))
    with Engine.from_settings(settings, middleware=[Refuse(), Recorder("r", calls)]) as engine:
        job = engine.enqueue_sync("allowed", {"n": 1})
        with pytest.raises(PermissionError, match="off limits"):
            engine.enqueue_sync("forbidden")
    assert [j.task for j in asyncio.run(stored(settings))] == ["allowed"]
    assert calls == [("r", "before_enqueue", "allowed"), ("r", "after_enqueue", "allowed", "queued")]
    assert job.task == "allowed"


async def test_a_hanging_hook_loses_no_outcome_and_a_stop_ends_it(
    calls: Calls, caplog: pytest.LogCaptureFixture
) -> None:
    hanging = asyncio.Event()

    class Hang(Middleware):
        async def after_run(self, job: Job, result: Json) -> None:
            hanging.set()
            await asyncio.sleep(3600)

    engine = Engine(open_store("memory"), middleware=[Hang(), Recorder("r", calls)])

    @engine.task()
    async def quick(ctx: JobContext) -> str:
        return "done"

    async with engine:
        job = await quick.enqueue()
        worker = engine.worker(heartbeat_every=0.02, poll_interval=0.05, grace_period=0.2)
        task = asyncio.create_task(worker.run())
        # The outcome was reported while the hook hangs; heartbeats meanwhile do not take it for a lost lease.
        assert (await engine.wait_for(job.id, timeout=60)).state is JobState.SUCCEEDED
        async with asyncio.timeout(60):
            await hanging.wait()
        await asyncio.sleep(0.3)  # heartbeats go by (every 0.02 s): none stops the job for a lease it gave up
        assert worker.in_flight == 1
        assert "lease of job" not in caplog.text
        worker.stop()
        async with asyncio.timeout(60):
            await task
        assert (await engine.get_job(job.id)).state is JobState.SUCCEEDED
        assert worker.in_flight == 0


async def test_before_run_sets_a_context_variable_the_task_sees_in_a_thread_too() -> None:
    current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="unset")
    seen: dict[str, str] = {}

    class Scope(Middleware):
        def before_run(self, job: Job) -> None:
            current.set(f"job {job.task}")

    engine = Engine(open_store("memory"), middleware=[Scope()])

    @engine.task()
    def in_thread(ctx: SyncJobContext) -> None:
        seen["in_thread"] = current.get()

    @engine.task()
    async def on_loop(ctx: JobContext) -> None:
        seen["on_loop"] = current.get()

    async with engine:
        jobs = [await in_thread.enqueue(), await on_loop.enqueue()]
        await run_until_stopped(engine, *(j.id for j in jobs))
    assert seen == {"in_thread": "job in_thread", "on_loop": "job on_loop"}
    assert current.get() == "unset"


def test_the_chain_takes_middleware_only_and_skips_hooks_nobody_overrides() -> None:
    chain = MiddlewareChain()
    with pytest.raises(TypeError, match="expected a jobengine Middleware, got function"):
        chain.add(lambda job: None)  # type: ignore[arg-type]
    assert not chain.wants("before_run")
    first = chain.add(Recorder("a", []))
    assert chain.wants("before_run") and not MiddlewareChain([Middleware()]).wants("before_run")
    assert list(chain) == [first] and len(chain) == 1


async def test_middleware_added_later_is_what_the_next_worker_runs(calls: Calls) -> None:
    engine = Engine(open_store("memory"))
    engine.middleware.add(Recorder("late", calls))

    @engine.task()
    async def noop(ctx: JobContext) -> None:
        return None

    async with engine:
        job = await noop.enqueue()
        await run_until_stopped(engine, job.id)
    assert [c[1] for c in calls] == ["before_enqueue", "after_enqueue", "before_run", "after_run", "after_attempt"]


class PhaseRecorder(Middleware):
    """Records the phase hooks and the attempts around them as ``(task, hook, phase or attempt, detail)``."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def before_run(self, job: Job) -> None:
        self.calls.append((job.task, "before_run", str(job.attempt), ""))

    def before_phase(self, job: Job, phase: str, index: int) -> None:
        self.calls.append((job.task, "before_phase", phase, str(index)))

    def after_phase(self, job: Job, phase: str, index: int, error: BaseException | None) -> None:
        self.calls.append((job.task, "after_phase", phase, repr(error)))


async def test_phase_hooks_bracket_each_phase_an_attempt_runs(calls: Calls) -> None:
    """A phase an earlier attempt finished is skipped without hooks; a failing phase's ``after_phase`` gets
    the error; a plain task (one implicit phase) gets no phase hooks."""
    failed: list[bool] = []

    def extract(ctx: SyncJobContext) -> int:
        calls.append(("etl", "ran", "extract", ""))
        return 1

    async def load(ctx: JobContext) -> int:
        calls.append(("etl", "ran", "load", ""))
        if not failed:
            failed.append(True)
            raise RuntimeError("disk full")
        return 2

    engine = Engine(open_store("memory"), middleware=[PhaseRecorder(calls)])
    engine.add_task("etl", phases=[extract, load], max_attempts=2, retry=FAST)

    @engine.task()
    async def plain(ctx: JobContext) -> int:
        return 3

    async with engine:
        job = await engine.enqueue("etl", None)
        other = await engine.enqueue("plain", None)
        done, simple = await run_until_stopped(engine, job.id, other.id)
    assert done.state is JobState.SUCCEEDED and simple.state is JobState.SUCCEEDED
    assert [c[1:] for c in calls if c[0] == "etl"] == [
        ("before_run", "1", ""),
        ("before_phase", "extract", "0"),
        ("ran", "extract", ""),
        ("after_phase", "extract", "None"),
        ("before_phase", "load", "1"),
        ("ran", "load", ""),
        ("after_phase", "load", "RuntimeError('disk full')"),
        ("before_run", "2", ""),  # extract succeeded in attempt 1: skipped, no hooks
        ("before_phase", "load", "1"),
        ("ran", "load", ""),
        ("after_phase", "load", "None"),
    ]
    assert [c[1:] for c in calls if c[0] == "plain"] == [("before_run", "1", "")]


async def test_plain_hooks_run_without_a_coroutine_and_an_async_one_hands_over_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    class Plain(Middleware):
        def __init__(self, name: str) -> None:
            self.name = name

        def before_run(self, job: Job) -> None:
            seen.append(self.name)

    class Later(Middleware):
        async def before_run(self, job: Job) -> None:
            await asyncio.sleep(0)
            seen.append("later")
            raise RuntimeError("later broke")

    job = Job("j1", "default", "default", "t", None, 0, 0.0, JobState.RUNNING, 1, 3, 0.0, 0.0)
    assert MiddlewareChain([Plain("a"), Plain("b")]).call_now("before_run", job) is None
    assert seen == ["a", "b"]
    seen.clear()
    rest = MiddlewareChain([Plain("a"), Later(), Plain("c")]).call_now("before_run", job)
    assert rest is not None and seen == ["a"]  # the async hook and those after it wait for the await
    with caplog.at_level(logging.ERROR, logger="jobengine.middleware"):
        await rest
    assert seen == ["a", "later", "c"]
    assert [r.getMessage() for r in caplog.records] == ["middleware Later.before_run raised; ignored"]
