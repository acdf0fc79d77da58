"""Test mode (jobengine.testing.TestEngine): an app's engine, built on a SQLite file, runs its jobs on a
temporary store when drained (retries, delays, dependencies, phases, dead jobs), and is put back unchanged."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobengine import (
    Engine,
    Job,
    JobContext,
    JobFailed,
    JobState,
    Middleware,
    NonRetryable,
    Settings,
    SyncJobContext,
    testing,
)
from jobengine.core.models import Event, NewJob
from jobengine.core.retry import RetryPolicy
from jobengine.errors import ConfigError


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Engine]:
    """An app's engine on a SQLite file that test mode must never open."""
    engine = Engine.from_settings(Settings(database=str(tmp_path / "app.db")))
    yield engine
    assert not (tmp_path / "app.db").exists(), "test mode wrote to the app's own database"


def test_a_job_runs_on_drain_and_the_engine_is_put_back(app: Engine) -> None:
    ran: list[str] = []

    @app.task
    def greet(ctx: SyncJobContext, name: str) -> str:
        ran.append(name)
        return f"hello {name}"

    store, settings, clock = app.store, app.settings, app.clock
    with testing.TestEngine(app) as t:
        assert app.store is not store and app.clock is t.clock
        handle = greet.enqueue_sync("Ada")
        assert ran == [] and handle.job.state is JobState.QUEUED  # nothing runs until the test says so
        (job,) = t.drain_sync()
        assert ran == ["Ada"]
        assert (job.id, job.state, job.result) == (handle.id, JobState.SUCCEEDED, "hello Ada")
        assert handle.result_sync(timeout=30) == "hello Ada"
        assert t.drain_sync() == []  # nothing left
    assert (app.store, app.settings, app.clock) == (store, settings, clock)
    assert [t.name for t in app.tasks] == ["greet"]


def test_an_error_in_the_block_still_puts_the_engine_back(app: Engine) -> None:
    store = app.store
    with pytest.raises(KeyError, match="from the test"), testing.TestEngine(app):
        assert app.store is not store
        raise KeyError("from the test")
    assert app.store is store and "_test_mode" not in app.__dict__
    with testing.TestEngine(app) as t:  # and it can be entered again
        assert t.drain_sync() == []


async def test_retries_run_at_once_with_the_clock_moved_over_their_backoff(app: Engine) -> None:
    @app.task(max_attempts=4, retry=RetryPolicy(base=60, jitter=False))
    async def flaky(ctx: JobContext) -> int:
        if ctx.attempt < 3:
            raise KeyError("not yet")
        return ctx.attempt

    async with testing.TestEngine(app) as t:
        before = t.clock.now()
        handle = await flaky.enqueue()
        (job,) = await t.drain()
        assert (job.state, job.result, job.attempt) == (JobState.SUCCEEDED, 3, 3)
        assert [e.type for e in job.errors] == ["KeyError", "KeyError"]
        assert t.clock.now() - before >= 60 + 120  # moved, not waited: the backoffs of attempts 1 and 2
        assert await handle.result(timeout=30) == 3


async def test_a_failing_task_goes_dead_and_its_dependents_are_cancelled(app: Engine) -> None:
    @app.task(max_attempts=3)
    async def broken() -> None:
        raise RuntimeError("always")

    @app.task
    async def refuse() -> None:
        raise NonRetryable("bad input")

    @app.task
    async def after() -> str:
        return "never"

    async with testing.TestEngine(app) as t:
        dead = await broken.enqueue()
        refused = await refuse.enqueue()
        blocked = await after.options(depends_on=[dead]).enqueue()
        ran = {j.id: j for j in await t.drain()}
        assert (ran[dead.id].state, ran[dead.id].attempt) == (JobState.DEAD, 3)
        assert (ran[refused.id].state, ran[refused.id].attempt) == (JobState.DEAD, 1)
        assert blocked.id not in ran
        assert (await app.get_job(blocked.id)).state is JobState.CANCELLED
        with pytest.raises(JobFailed, match="always"):
            await dead.result(timeout=30)


async def test_phases_dependencies_child_jobs_and_other_queues_all_run(app: Engine) -> None:
    order: list[str] = []

    async def extract(source: str) -> int:
        order.append("extract")
        return len(source)

    def load(ctx: SyncJobContext) -> int:
        order.append("load")
        ctx.save_checkpoint({"rows": ctx.results["extract"]})
        return ctx.results["extract"] * 2

    etl = app.add_task("etl", phases=[extract, load])

    @app.task
    async def child(n: int) -> int:
        order.append(f"child {n}")
        return n

    @app.task(queue="reports")
    async def parent() -> str:
        order.append("parent")
        await child.options(queue="elsewhere").enqueue(7)  # a queue no task names: it is drained too
        return "parent"

    async with testing.TestEngine(app) as t:
        first = await parent.enqueue()
        day = await etl.options(depends_on=[first]).enqueue(source="s3://day")
        ran = await t.drain()
        assert order == ["parent", "extract", "load", "child 7"] or order == ["parent", "child 7", "extract", "load"]
        assert await day.result(timeout=30) == {"extract": 8, "load": 16}
        job = await app.get_job(day.id)
        assert [(p.name, p.state.value) for p in job.phases] == [("extract", "succeeded"), ("load", "succeeded")]
        assert job.phases[1].checkpoint == {"rows": 8}
        assert {j.task for j in ran} == {"parent", "etl", "child"}


async def test_a_delayed_job_waits_for_the_clock_unless_drain_advances_it(app: Engine) -> None:
    @app.task
    async def later() -> str:
        return "done"

    async with testing.TestEngine(app) as t:
        handle = await later.options(delay=3600).enqueue()
        assert await t.drain(advance=False) == []
        assert (await app.get_job(handle.id)).state is JobState.SCHEDULED
        t.clock.advance(3600)
        (job,) = await t.drain(advance=False)
        assert job.state is JobState.SUCCEEDED
        other = await later.options(delay=86_400).enqueue()
        (job,) = await t.drain()
        assert (job.id, job.state) == (other.id, JobState.SUCCEEDED)


async def test_what_the_app_set_on_its_engine_stays_and_its_listeners_hear_the_jobs(app: Engine) -> None:
    heard: list[str] = []

    def listen(event: Event) -> None:
        heard.append(event.type)

    app.bus.add_listener(listen)
    app.mine = "kept"  # type: ignore[attr-defined]

    @app.task
    async def noop() -> None:
        return None

    async with testing.TestEngine(app) as t:
        assert app.mine == "kept"  # type: ignore[attr-defined]
        await noop.enqueue()
        await t.drain()
    app.bus.remove_listener(listen)
    assert {"job.enqueued", "job.started", "job.succeeded"} <= set(heard)


async def test_misuse_is_a_clear_error(app: Engine) -> None:
    @app.task
    async def forever() -> None:
        await forever.enqueue()  # each run enqueues the next: drain never ends

    t = testing.TestEngine(app)
    with pytest.raises(ConfigError, match="enter the TestEngine first"):
        await t.drain()
    async with t:
        with pytest.raises(ConfigError, match="test mode already"):
            async with testing.TestEngine(app):
                pass
        await forever.enqueue()
        with pytest.raises(TimeoutError, match="drain: jobs still ran after 2s"):
            await t.drain(timeout=2)
    assert "_test_mode" not in app.__dict__


def test_the_pytest_fixture_is_registered_and_puts_the_engine_back(
    app: Engine, jobengine_testing: Callable[[Engine], testing.TestEngine]
) -> None:
    (plugin,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "jobengine"]
    assert plugin.value == "jobengine.testing.plugin"

    @app.task
    async def double(n: int) -> int:
        return 2 * n

    t = jobengine_testing(app)
    handle = double.enqueue_sync(21)
    t.drain_sync()
    assert handle.result_sync(timeout=30) == 42


def test_the_apps_middleware_and_declared_schedules_stay_in_test_mode(app: Engine) -> None:
    seen: list[str] = []

    class Recording(Middleware):
        def before_enqueue(self, job: NewJob) -> None:
            seen.append(f"enqueue {job.task}")

        def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
            seen.append(f"{outcome} {job.task}")

    app.middleware.add(Recording())

    @app.periodic("0 * * * *", name="hourly")
    @app.task
    def tick(ctx: SyncJobContext) -> None:
        return None

    with testing.TestEngine(app) as t:
        tick.enqueue_sync()
        t.drain_sync()
        assert [s.name for s in app.periodic.declared] == ["hourly"]
    assert seen == ["enqueue tick", "succeeded tick"]
