"""Task handles on `database: memory`: the payload their arguments make, the errors of a call that does not
fit, pydantic parameters, tasks written the original way, phases, and results through the job's handle."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import jobengine
from jobengine import Engine, InvalidJob, JobContext, JobFailed, JobState, SyncJobContext, Task
from jobengine.core.retry import RetryPolicy
from jobengine.engine.compose import open_store
from jobengine.errors import ConfigError, NonRetryable
from jobengine.worker import Worker


class Address(pydantic.BaseModel):
    email: str
    name: str = "friend"


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    e = Engine(open_store("memory"))
    async with e:
        yield e


@contextlib.asynccontextmanager
async def working(engine: Engine) -> AsyncIterator[Worker]:
    """A worker for the tasks registered so far (a worker claims only the tasks it runs)."""
    w = engine.worker(concurrency=4, poll_interval=0.05, heartbeat_every=0.05)
    running = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop()
        async with asyncio.timeout(60):
            await running


async def test_arguments_are_stored_by_parameter_name_and_the_result_comes_back(engine: Engine) -> None:
    @engine.task
    async def send_welcome(email: str, lang: str = "en") -> str:
        return f"{lang}:{email}"

    async with working(engine):
        handle = await send_welcome.enqueue("ada@example.com", lang="fr")
        assert handle.job.payload == {"email": "ada@example.com", "lang": "fr"}
        assert await handle.result(timeout=60) == "fr:ada@example.com"
        default = await send_welcome.enqueue(email="bob@example.com")
        assert default.job.payload == {"email": "bob@example.com"}  # defaults are the worker's, not stored
        assert await default.result(timeout=60) == "en:bob@example.com"


async def test_the_same_job_enqueued_by_name_runs_the_same(engine: Engine) -> None:
    @engine.task(name="welcome")
    async def send_welcome(email: str, lang: str = "en") -> str:
        return f"{lang}:{email}"

    async with working(engine):
        job = await engine.enqueue("welcome", {"email": "ada@example.com"})  # as the HTTP API or Go would
        done = await engine.wait_for(job.id, timeout=60)
        assert (done.state, done.result) == (JobState.SUCCEEDED, "en:ada@example.com")


async def test_a_call_that_does_not_fit_is_a_type_error_naming_the_parameter(engine: Engine) -> None:
    @engine.task
    async def send_welcome(email: str, lang: str = "en") -> None: ...

    with pytest.raises(TypeError, match="unexpected keyword argument 'emial'"):
        await send_welcome.enqueue(emial="x")
    with pytest.raises(TypeError, match="missing a required argument: 'email'"):
        await send_welcome.enqueue()
    with pytest.raises(TypeError, match="too many positional arguments"):
        send_welcome.enqueue_sync("a", "b", "c")
    with pytest.raises(InvalidJob, match="lang"):
        await send_welcome.enqueue("a", lang=object())
    assert await engine.list_jobs() == []


async def test_a_pydantic_parameter_is_validated_at_enqueue_and_rebuilt_in_the_worker(engine: Engine) -> None:
    seen: list[Address] = []

    @engine.task
    async def greet(to: Address) -> Address:
        seen.append(to)
        return Address(email=to.email.upper(), name=to.name)

    async with working(engine):
        with pytest.raises(InvalidJob, match="to: email: Field required") as refused:
            await greet.enqueue({"name": "Ada"})
        assert refused.value.field == "to"
        handle = await greet.enqueue(Address(email="ada@example.com"))
        assert handle.job.payload == {"to": {"email": "ada@example.com", "name": "friend"}}
        assert await handle.result(timeout=60) == Address(email="ADA@EXAMPLE.COM", name="friend")
        assert seen == [Address(email="ada@example.com")]


BAD_PAYLOADS = [
    ({"email": "a", "emial": "b"}, "payload.emial", "has no parameter 'emial'"),
    ({}, "payload.email", "missing argument 'email'"),
    (["a"], "payload", "takes named arguments"),
]


async def test_an_enqueue_by_name_with_a_payload_that_cannot_be_the_arguments_is_refused(engine: Engine) -> None:
    @engine.task
    async def send_welcome(email: str) -> None: ...

    for payload, field, why in BAD_PAYLOADS:
        with pytest.raises(InvalidJob, match=why) as refused:
            await engine.enqueue("send_welcome", payload)
        assert refused.value.field == field
    assert await engine.list_jobs() == []


async def test_a_payload_that_cannot_be_the_arguments_sends_the_job_to_dead_naming_why(engine: Engine) -> None:
    @engine.task(max_attempts=3)
    async def send_welcome(email: str) -> None: ...

    elsewhere = Engine(engine.store)  # a producer that does not run the task (an API server, say)
    async with working(engine):
        for payload, field, why in BAD_PAYLOADS:
            job = await elsewhere.enqueue("send_welcome", payload)
            with pytest.raises(JobFailed) as failed:
                await jobengine.JobHandle(engine, job).result(timeout=60)
            assert failed.value.state == "dead"
            assert failed.value.job.attempt == 1  # NonRetryable: a retry cannot make it fit
            assert failed.value.error is not None
            assert failed.value.error.message.startswith(f"{field}: ") and why in failed.value.error.message


async def test_tasks_written_the_original_way_still_get_their_context(engine: Engine) -> None:
    @engine.task
    async def old(ctx):
        return ctx.payload

    @engine.task
    def old_sync(ctx: Any) -> Any:
        assert isinstance(ctx, SyncJobContext)
        return ctx.payload

    async with working(engine):
        for name in ("old", "old_sync"):
            job = await engine.enqueue(name, [1, "any shape"])
            done = await engine.wait_for(job.id, timeout=60)
            assert done.result == [1, "any shape"]
        assert engine.tasks.get("old") is not None and engine.tasks.get("old").phases[0].fn is old.__wrapped__


async def test_a_task_with_its_context_may_read_more_of_the_payload(engine: Engine) -> None:
    for name in ("a", "b"):

        async def run(ctx: JobContext, task: str = name) -> list[Any]:  # a default binds the loop's value
            return [task, ctx.payload]

        engine.add_task(name, run)
    async with working(engine):
        job = await engine.enqueue("a", {"sleep": 0.01})  # not an argument: read through ctx.payload
        assert (await engine.wait_for(job.id, timeout=60)).result == ["a", {"sleep": 0.01}]
        job = await engine.enqueue("b", [1, 2])
        assert (await engine.wait_for(job.id, timeout=60)).result == ["b", [1, 2]]
        job = await engine.enqueue("b", {"task": "given"})
        assert (await engine.wait_for(job.id, timeout=60)).result == ["given", {"task": "given"}]


async def test_a_context_parameter_anywhere_receives_the_context(engine: Engine) -> None:
    @engine.task
    def render(report: str, ctx: SyncJobContext, *, pages: int = 1) -> list[Any]:
        ctx.progress(0.5, "half way")
        return [report * pages, ctx.attempt]

    async with working(engine):
        handle = await render.options(priority=2).enqueue("ab", pages=2)
        assert handle.job.payload == {"report": "ab", "pages": 2}
        assert await handle.result(timeout=60) == ["abab", 1]
        with pytest.raises(TypeError, match="'ctx'"):
            await render.enqueue("ab", ctx=None)


async def test_options_are_frozen_typed_and_combine(engine: Engine) -> None:
    @engine.task(queue="mail", priority=1)
    async def send(email: str) -> None: ...

    first = await send.enqueue("a")
    urgent = send.options(priority=9, queue="urgent")
    later = urgent.options(delay=3600, idempotency_key="k", depends_on=[first])
    handle = await later.enqueue("b")
    assert (handle.job.queue, handle.job.priority, handle.job.state) == ("urgent", 9, JobState.BLOCKED)
    assert handle.job.depends_on == (first.id,) and handle.job.idempotency_key == "k"
    again = await later.enqueue("b")
    assert again.id == handle.id  # the same idempotency key names the same job
    plain = await send.enqueue("c")  # options made a new handle; this one kept the task's defaults
    assert (plain.job.queue, plain.job.priority) == ("mail", 1)
    with pytest.raises(TypeError):
        send.options(prority=5)


async def test_calling_the_task_calls_the_function(engine: Engine) -> None:
    @engine.task
    async def add(a: int, b: int) -> int:
        return a + b

    @engine.task(name="mul")
    def mul(a: int, b: int) -> int:
        return a * b

    assert await add(2, 3) == 5
    assert mul(2, 3) == 6
    assert isinstance(add, Task) and add.name == "add" and add.__name__ == "add"
    assert list(inspect.signature(add).parameters) == ["a", "b"]
    assert await engine.list_jobs() == []


async def test_phases_take_the_arguments_they_name(engine: Engine) -> None:
    async def extract(source: str, ctx: JobContext) -> dict[str, int]:
        return {"rows": len(source)}

    def transform(ctx: SyncJobContext, factor: int = 2) -> int:
        rows: int = ctx.results["extract"]["rows"]
        return rows * factor

    async def load(ctx: JobContext) -> str:
        return "loaded"

    etl = engine.add_task("etl", phases=[extract, transform, load])
    async with working(engine):
        handle = await etl.enqueue(source="abcd", factor=3)
        assert handle.job.payload == {"source": "abcd", "factor": 3}
        assert await handle.result(timeout=60) == {"extract": {"rows": 4}, "transform": 12, "load": "loaded"}
        with pytest.raises(TypeError, match="source"):
            await etl.enqueue(factor=3)
        with pytest.raises(TypeError, match="positional"):
            await etl.enqueue("abcd")
        with pytest.raises(TypeError, match="phases"):
            etl()


async def test_a_failed_job_raises_job_failed_with_its_last_error(engine: Engine) -> None:
    @engine.task(max_attempts=2, retry=RetryPolicy(base=0.01, cap=0.02))
    async def broken(n: int) -> None:
        raise ValueError(f"bad {n}")

    @engine.task
    def refuses() -> None:
        raise NonRetryable("never")

    async with working(engine):
        handle = await broken.enqueue(7)
        with pytest.raises(JobFailed, match="ended dead: ValueError: bad 7") as failed:
            await handle.result(timeout=60)
        assert failed.value.job.attempt == 2 and failed.value.state == "dead"
        assert failed.value.error is not None and failed.value.error.type == "ValueError"
        with pytest.raises(JobFailed, match="NonRetryable: never"):
            await (await refuses.enqueue()).result(timeout=60)


async def test_a_cancelled_job_raises_job_failed(engine: Engine) -> None:
    @engine.task
    async def later(n: int) -> None: ...

    handle = await later.options(delay=3600).enqueue(1)
    await engine.cancel(handle.id)
    with pytest.raises(JobFailed, match="ended cancelled") as failed:
        await handle.result(timeout=60)
    assert failed.value.error is None and failed.value.job.state is JobState.CANCELLED


async def test_result_times_out_while_the_job_has_not_ended(engine: Engine) -> None:
    @engine.task
    async def never_run(n: int) -> None: ...

    handle = await never_run.enqueue(1)  # no worker
    with pytest.raises(TimeoutError):
        await handle.result(timeout=0.2)


def test_sync_code_enqueues_and_waits_for_the_result(tmp_path: Path) -> None:
    """A producer process's view: a sync script with its own engine, a worker beside it on the same file."""
    settings = jobengine.Settings(database=str(tmp_path / "jobs.db"))
    producer, consumer = Engine.from_settings(settings), Engine.from_settings(settings)
    for engine in (producer, consumer):

        @engine.task
        def double(n: int) -> int:
            return 2 * n

    stop, migrated = threading.Event(), threading.Event()

    async def serve() -> None:
        async with consumer:  # migrates the new file: the producer enqueues after that
            migrated.set()
            worker = consumer.worker(poll_interval=0.05)
            running = asyncio.create_task(worker.run())
            await asyncio.to_thread(stop.wait, 120)
            worker.stop()
            await running

    thread = threading.Thread(target=asyncio.run, args=(serve(),))
    thread.start()
    try:
        assert migrated.wait(60)
        handle = double.enqueue_sync(21)  # the producer's handle (the last one registered on it)
        assert handle.job.payload == {"n": 21}
        assert handle.result_sync(timeout=60) == 42
    finally:
        stop.set()
        thread.join(60)
        asyncio.run(producer.close())


def test_star_args_cannot_be_a_task(engine: Engine) -> None:
    with pytest.raises(ConfigError, match=r"\*names"):

        @engine.task
        async def many(*names: str) -> None: ...


def test_help_opens_on_the_api() -> None:
    doc = jobengine.__doc__ or ""
    assert doc.startswith("jobengine: a durable job engine")
    assert "send_welcome.enqueue(" in doc and "handle.result(" in doc
    for name in ("Engine", "Task", "JobHandle", "JobContext", "JobFailed", "Settings"):
        assert name in jobengine.__all__
        assert "::" in (getattr(jobengine, name).__doc__ or ""), f"{name} has no usage example"
    for method in (Task.enqueue, Task.enqueue_sync, Task.options, jobengine.JobHandle.result, Engine.enqueue):
        assert method.__doc__, method
