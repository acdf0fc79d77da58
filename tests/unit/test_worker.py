"""The worker runtime on `database: memory`: retries, phases, cancellation, leases, shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.models import PhaseState
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.errors import IllegalState, NonRetryable
from jobengine.ports.workers import WorkerInfo
from jobengine.settings import Settings
from jobengine.worker import JobContext, SyncJobContext, Worker
from jobengine.worker.runtime import DUE_FRESH, FLUSH_EARLY
from support.waiting import until

FAST = RetryPolicy(base=0.01, cap=0.02)


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    e = Engine(open_store("memory"))
    async with e:
        yield e


async def start(engine: Engine, **options: object) -> tuple[Worker, asyncio.Task[None]]:
    opts = {"concurrency": 4, "heartbeat_every": 0.05, "lease_seconds": 5.0, "poll_interval": 0.05}
    opts.update(options)
    worker = engine.worker(**opts)
    return worker, asyncio.create_task(worker.run())


async def stop(worker: Worker, task: asyncio.Task[None]) -> None:
    worker.stop()
    await asyncio.wait_for(task, 60)


async def test_retries_with_backoff_then_dead_keeping_every_error(engine: Engine) -> None:
    @engine.task(max_attempts=3, retry=FAST)
    async def broken(ctx: JobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    worker, task = await start(engine)
    job = await engine.wait_for((await engine.enqueue("broken")).id, timeout=60)
    await stop(worker, task)
    assert job.state is JobState.DEAD
    assert job.attempt == 3
    assert [e.message for e in job.errors] == ["attempt 1", "attempt 2", "attempt 3"]
    assert all(e.type == "ValueError" and e.traceback for e in job.errors)
    types = [e.type for e in await engine.events(job_id=job.id)]
    assert types.count("job.failed") == 2 and types[-1] == "job.dead"


async def test_non_retryable_goes_dead_at_once(engine: Engine) -> None:
    @engine.task(max_attempts=5)
    async def hopeless(ctx: JobContext) -> None:
        raise NonRetryable("bad input")

    worker, task = await start(engine)
    job = await engine.wait_for((await engine.enqueue("hopeless")).id, timeout=60)
    await stop(worker, task)
    assert (job.state, job.attempt, job.reason) == (JobState.DEAD, 1, "bad input")


async def test_timeout_is_a_failed_attempt(engine: Engine) -> None:
    @engine.task(max_attempts=1, timeout=0.05)
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(5)

    worker, task = await start(engine)
    job = await engine.wait_for((await engine.enqueue("slow")).id, timeout=60)
    await stop(worker, task)
    assert job.state is JobState.DEAD
    assert job.errors[0].type == "TaskTimeout"


async def test_sync_task_runs_in_a_thread_and_saves_a_checkpoint(engine: Engine) -> None:
    threads: list[str] = []

    @engine.task()
    def blocking(ctx: SyncJobContext) -> int:
        threads.append(threading.current_thread().name)
        ctx.save_checkpoint({"done": 3})
        return int(ctx.payload["n"]) * 2

    worker, task = await start(engine)
    job = await engine.wait_for((await engine.enqueue("blocking", {"n": 21})).id, timeout=60)
    await stop(worker, task)
    assert job.result == 42
    assert threads and threads[0].startswith("jobengine-task")


async def test_phase_retry_resumes_at_the_failed_phase_with_earlier_results(engine: Engine) -> None:
    runs: list[str] = []

    async def fetch(ctx: JobContext) -> dict[str, int]:
        runs.append("fetch")
        return {"rows": 7}

    async def render(ctx: JobContext) -> int:
        runs.append("render")
        ctx.progress(0.5)
        if ctx.attempt == 1:
            raise RuntimeError("renderer crashed")
        return int(ctx.results["fetch"]["rows"]) * 10

    async def publish(ctx: JobContext) -> str:
        runs.append("publish")
        return f"published {ctx.results['render']}"

    engine.add_task("report", phases=[fetch, render, publish], retry=FAST)
    worker, task = await start(engine)
    job = await engine.wait_for((await engine.enqueue("report")).id, timeout=60)
    await stop(worker, task)
    assert job.state is JobState.SUCCEEDED
    assert runs == ["fetch", "render", "render", "publish"]
    assert job.result == {"fetch": {"rows": 7}, "render": 70, "publish": "published 70"}
    assert [p.state for p in job.phases] == [PhaseState.SUCCEEDED] * 3
    assert job.progress == 1.0
    phase_events = [e.data for e in await engine.events(job_id=job.id, limit=100) if e.type == "job.phase"]
    assert {"phase_event": "phase.failed", "phase": "render"}.items() <= phase_events[3].items()


async def test_dependent_of_a_dead_job_is_cancelled_and_never_runs(engine: Engine) -> None:
    published: list[str] = []

    @engine.task(max_attempts=1)
    async def verify(ctx: JobContext) -> None:
        raise ValueError("checksum mismatch")

    @engine.task()
    async def publish(ctx: JobContext) -> None:
        published.append(ctx.job_id)

    v = await engine.enqueue("verify")
    p = await engine.enqueue("publish", depends_on=[v.id])
    assert p.state is JobState.BLOCKED
    worker, task = await start(engine)
    await engine.wait_for(v.id, timeout=60)
    p = await engine.wait_for(p.id, timeout=60)
    await asyncio.sleep(0.1)
    await stop(worker, task)
    assert p.state is JobState.CANCELLED
    assert p.reason is not None and v.id in p.reason and "dead" in p.reason
    assert published == []


async def test_dependent_runs_after_its_dependency_succeeded(engine: Engine) -> None:
    order: list[str] = []

    @engine.task()
    async def step(ctx: JobContext) -> None:
        await asyncio.sleep(0.02)
        order.append(ctx.payload)

    first = await engine.enqueue("step", "first")
    second = await engine.enqueue("step", "second", depends_on=[first.id], priority=10)
    worker, task = await start(engine)
    await engine.wait_for(second.id, timeout=60)
    await stop(worker, task)
    assert order == ["first", "second"]


async def test_cancel_a_running_async_job(engine: Engine) -> None:
    started = asyncio.Event()

    @engine.task()
    async def forever(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    worker, task = await start(engine)
    job = await engine.enqueue("forever")
    await asyncio.wait_for(started.wait(), 60)
    requested = await engine.cancel(job.id, reason="user asked")
    assert requested.state is JobState.RUNNING and requested.cancel_requested
    job = await engine.wait_for(job.id, timeout=60)
    await stop(worker, task)
    assert job.state is JobState.CANCELLED
    with pytest.raises(IllegalState):
        await engine.cancel(job.id)


async def test_cancel_a_running_sync_job_cooperatively(engine: Engine) -> None:
    started = threading.Event()

    @engine.task()
    def loop(ctx: SyncJobContext) -> None:
        started.set()
        for _ in range(500):
            ctx.raise_if_cancelled()
            threading.Event().wait(0.01)

    worker, task = await start(engine)
    job = await engine.enqueue("loop")
    await asyncio.to_thread(started.wait, 5)
    await engine.cancel(job.id)
    job = await engine.wait_for(job.id, timeout=60)
    await stop(worker, task)
    assert job.state is JobState.CANCELLED


async def test_cancel_a_queued_job_and_retry_it(engine: Engine) -> None:
    job = await engine.enqueue("nothing-registered", delay=60)
    assert job.state is JobState.SCHEDULED
    job = await engine.cancel(job.id)
    assert job.state is JobState.CANCELLED
    job = await engine.retry(job.id)
    assert (job.state, job.attempt) == (JobState.QUEUED, 0)


async def test_graceful_stop_lets_short_jobs_finish_and_releases_long_ones() -> None:
    engine = Engine(open_store("memory"))
    async with engine:

        @engine.task()
        async def short(ctx: JobContext) -> str:
            await asyncio.sleep(0.2)
            return "done"

        @engine.task()
        async def long(ctx: JobContext) -> str:
            await asyncio.sleep(30)
            return "never"

        worker, task = await start(engine, grace_period=1.0)
        s = await engine.enqueue("short")
        l_ = await engine.enqueue("long")
        await until(lambda: worker.in_flight == 2)
        await stop(worker, task)
        s, l_ = await engine.get_job(s.id), await engine.get_job(l_.id)
        assert s.state is JobState.SUCCEEDED
        assert (l_.state, l_.attempt, l_.lease_token) == (JobState.QUEUED, 0, None)


async def test_second_stop_releases_at_once(engine: Engine) -> None:
    @engine.task()
    async def long(ctx: JobContext) -> None:
        await asyncio.sleep(30)

    worker, task = await start(engine, grace_period=60.0)
    job = await engine.enqueue("long")
    await until(lambda: worker.in_flight == 1)
    worker.stop()
    await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert (await engine.get_job(job.id)).state is JobState.QUEUED


async def test_lost_lease_stops_the_task_and_its_late_completion_is_refused() -> None:
    clock = ManualClock(start=1_000_000.0)
    engine = Engine(open_store("memory"), clock=clock)
    async with engine:
        proceed = asyncio.Event()
        runs: list[int] = []

        @engine.task(max_attempts=3)
        async def slow(ctx: JobContext) -> int:
            runs.append(ctx.attempt)
            if ctx.attempt == 1:
                await proceed.wait()
            return ctx.attempt

        job = await engine.enqueue("slow")
        first, t1 = await start(engine, lease_seconds=10.0, heartbeat_every=0.05)
        await until(lambda: bool(runs))
        first.stop()  # keep the job stuck in flight: stop() lets it finish within the grace period
        # The lease expires; a rescuer elsewhere hands the job on. A heartbeat landing between the clock's
        # jump and the rescue renews the lease (it was not rescued yet), so jump again until one wins.
        for _ in range(50):
            clock.advance(60)
            rescued = await engine.transitions.rescue_jobs()
            if rescued.jobs:
                break
        assert [j.id for j in rescued.jobs] == [job.id]
        second, t2 = await start(engine)
        done = await engine.wait_for(job.id, timeout=60)
        assert done.result == 2
        proceed.set()  # the first worker's attempt now finishes, too late
        await asyncio.wait_for(t1, 60)
        await stop(second, t2)
        final = await engine.get_job(job.id)
        assert (final.state, final.result, final.attempt) == (JobState.SUCCEEDED, 2, 2)
        succeeded = [e for e in await engine.events(job_id=job.id, limit=100) if e.type == "job.succeeded"]
        assert len(succeeded) == 1


async def test_the_first_jobs_run_while_the_worker_registers(engine: Engine) -> None:
    """Registering (on PostgreSQL a session of its own, then a row) does not hold back the first claim; the
    worker's row is written all the same, and removed as it stops even if it stops before the row was in."""

    @engine.task()
    async def known(ctx: JobContext) -> str:
        return "ran"

    gate = asyncio.Event()
    register = engine.transitions.register_worker

    async def slow_register(info: WorkerInfo) -> WorkerInfo:
        await gate.wait()
        return await register(info)

    engine.transitions.register_worker = slow_register  # type: ignore[method-assign]
    job = await engine.enqueue("known")
    worker, task = await start(engine)
    assert (await engine.wait_for(job.id, timeout=60)).result == "ran"
    assert await engine.fleet.live() == []  # still registering
    gate.set()
    await until(lambda: worker._registered)
    assert [w.id for w in await engine.fleet.live()] == [worker.id]
    await stop(worker, task)
    assert await engine.fleet.live() == []

    gate.clear()  # stopped while registering: the row written late is removed too
    worker, task = await start(engine)
    await asyncio.sleep(0.1)
    worker.stop()
    await asyncio.sleep(0.1)
    gate.set()
    await asyncio.wait_for(task, 60)
    assert await engine.fleet.live() == []


async def test_a_job_of_a_task_the_worker_lacks_is_never_claimed_and_says_why(engine: Engine) -> None:
    @engine.task()
    async def known(ctx: JobContext) -> str:
        return "ran"

    worker, task = await start(engine)
    unknown = await engine.enqueue("nobody-runs-this", max_attempts=1)
    # A job enqueued after it, of a task the worker runs, finishes: the worker looked and passed it over.
    assert (await engine.wait_for((await engine.enqueue("known")).id, timeout=60)).result == "ran"
    waiting = await engine.get_job(unknown.id)
    assert (waiting.state, waiting.attempt) == (JobState.QUEUED, 0)
    assert await engine.fleet.waiting_reasons([waiting]) == {waiting.id: "no worker runs task 'nobody-runs-this'"}
    (registered,) = await engine.fleet.live()
    assert registered.id == worker.id and registered.tasks == ("known",)
    await stop(worker, task)
    assert await engine.fleet.live() == []  # it left the registry as it stopped
    assert await engine.fleet.waiting_reasons([waiting]) == {}  # no worker at all: nothing to say


async def test_enqueue_sync_from_a_thread(engine: Engine) -> None:
    job = await asyncio.to_thread(engine.enqueue_sync, "anything", {"a": 1})
    assert (await engine.get_job(job.id)).payload == {"a": 1}


async def test_progress_is_saved_and_announced_while_the_job_runs(engine: Engine) -> None:
    halfway = asyncio.Event()

    @engine.task()
    async def crunch(ctx: JobContext) -> None:
        ctx.progress(0.5, "half")
        await halfway.wait()

    sub = engine.bus.subscribe()
    worker, task = await start(engine, progress_every=0.05)
    job = await engine.enqueue("crunch")
    async with asyncio.timeout(5):
        while (event := await sub.get()).type != "job.phase":
            pass
    assert event.data["phase_event"] == "phase.progress"
    assert (event.data["progress"], event.data["message"]) == (0.5, "half")
    running = await engine.get_job(job.id)
    assert running.state is JobState.RUNNING and running.progress == 0.5
    halfway.set()
    await engine.wait_for(job.id, timeout=60)
    await stop(worker, task)
    sub.close()


@pytest.mark.parametrize("spacing", [0.0, 0.3])
async def test_outcomes_finishing_within_flush_spacing_share_one_flush(engine: Engine, spacing: float) -> None:
    # One flush is one store call at one engine time: jobs reported together have the same finished_at.
    @engine.task()
    async def nap(ctx: JobContext) -> None:
        await asyncio.sleep(ctx.payload["s"])

    worker, task = await start(engine, flush_spacing=spacing)
    first = await engine.enqueue("nap", {"s": 0})
    await engine.wait_for(first.id, timeout=60)  # its flush started the spacing window
    later = [await engine.enqueue("nap", {"s": s}) for s in (0.02, 0.08)]
    done = [await engine.wait_for(j.id, timeout=60) for j in later]
    await stop(worker, task)
    assert all(j.state is JobState.SUCCEEDED for j in done)
    finished = {j.finished_at for j in done}
    assert len(finished) == (1 if spacing else 2)


def test_the_flush_spacing_setting_reaches_the_worker() -> None:
    assert Engine(open_store("memory")).worker().options.flush_spacing == Settings().worker_flush_spacing
    engine = Engine(open_store("memory"), settings=Settings(worker_flush_spacing=0.01))
    assert engine.worker().options.flush_spacing == 0.01
    assert engine.worker(flush_spacing=0).options.flush_spacing == 0


async def test_a_busy_worker_flushes_without_waiting_out_the_spacing(engine: Engine) -> None:
    @engine.task()
    async def noop(ctx: JobContext) -> None:
        return None

    worker, task = await start(engine, flush_spacing=30.0, concurrency=FLUSH_EARLY + 10)
    first = await engine.enqueue("noop")
    await engine.wait_for(first.id, timeout=60)  # the first flush goes at once and starts a 30 s window
    few = [await engine.enqueue("noop") for _ in range(3)]
    await until(lambda: worker.processed == 4)  # finished in the worker...
    assert {(await engine.get_job(j.id)).state for j in few} == {JobState.RUNNING}  # ...not yet reported
    many = await engine.enqueue_many([engine.new_job("noop") for _ in range(FLUSH_EARLY)])
    done = [await engine.wait_for(j.id, timeout=60) for j in [*few, *many]]  # long before the window ends
    assert {j.state for j in done} == {JobState.SUCCEEDED}
    await stop(worker, task)


async def test_a_job_that_others_wait_on_is_reported_without_waiting_out_the_spacing(engine: Engine) -> None:
    @engine.task()
    async def step(ctx: JobContext) -> None:
        return None

    worker, task = await start(engine, flush_spacing=30.0)
    first = await engine.enqueue("step")
    await engine.wait_for(first.id, timeout=60)  # the first flush goes at once and starts a 30 s window
    a = engine.new_job("step")
    b = engine.new_job("step", depends_on=[a.id])
    c = engine.new_job("step", depends_on=[b.id])
    await engine.enqueue_many([a, b, c])
    # a and b are reported at once (their dependents wait on them); c has none, so it waits for the window.
    assert (await engine.wait_for(b.id, timeout=60)).state is JobState.SUCCEEDED
    await until(lambda: worker.processed == 4)
    assert (await engine.get_job(c.id)).state is JobState.RUNNING
    await stop(worker, task)
    assert (await engine.get_job(c.id)).state is JobState.SUCCEEDED  # reported as the worker stopped


async def test_the_observer_counts_retries_dead_letters_and_a_release_at_the_stop(engine: Engine) -> None:
    from jobengine.worker.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    gate = asyncio.Event()

    @engine.task(max_attempts=2, retry=FAST)
    async def broken(ctx: JobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    @engine.task()
    async def hangs(ctx: JobContext) -> None:
        await gate.wait()

    def value(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    worker, task = await start(engine, observer=metrics, grace_period=0.0)
    dead = await engine.wait_for((await engine.enqueue("broken")).id, timeout=60)
    held = await engine.enqueue("hangs")
    await until(lambda: value("jobengine_worker_jobs_in_flight") == 1)
    await stop(worker, task)  # no grace: the hanging job is released
    broken_labels = {"queue": "default", "task": "broken"}
    assert dead.state is JobState.DEAD
    assert value("jobengine_worker_jobs_started_total", **broken_labels) == 2
    assert value("jobengine_worker_jobs_failed_total", **broken_labels, outcome="retry") == 1
    assert value("jobengine_worker_jobs_failed_total", **broken_labels, outcome="dead") == 1
    assert value("jobengine_worker_job_duration_seconds_count", **broken_labels) == 2
    hangs_labels = {"queue": "default", "task": "hangs", "reason": "released"}
    assert value("jobengine_worker_jobs_stopped_total", **hangs_labels) == 1
    assert value("jobengine_worker_jobs_in_flight") == 0
    assert value("jobengine_worker_jobs_claimed_total") == 3
    assert (await engine.get_job(held.id)).state is JobState.QUEUED


async def test_an_idle_worker_reads_next_run_at_again_only_when_its_answer_is_old_or_due() -> None:
    """Every runnable commit wakes every idle worker; the answer of the last read serves for ``DUE_FRESH``
    seconds of loop time, unless the time it named has come."""
    clock = ManualClock(start=1_000_000.0)
    engine = Engine(open_store("memory"), clock=clock)
    async with engine:

        @engine.task()
        async def later(ctx: JobContext) -> None:
            pass

        job = await engine.enqueue("later", delay=30)
        reads: list[float | None] = []
        read = engine.store.next_run_at

        async def counted(queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
            reads.append(answer := await read(queues, tasks))
            return answer

        engine.store.next_run_at = counted  # type: ignore[method-assign]
        worker = engine.worker()
        worker._tasks = ("later",)  # what run() reads from the registry
        assert await worker._next_due(0.0) == job.run_at
        assert await worker._next_due(DUE_FRESH / 2) == job.run_at
        assert reads == [job.run_at]  # the second wake-up reused the answer
        await worker._next_due(DUE_FRESH)
        assert len(reads) == 2  # old: read again
        clock.advance(31)
        await worker._next_due(DUE_FRESH * 1.5)
        assert len(reads) == 3  # young, but the time it named has come
