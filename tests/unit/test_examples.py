"""The bundled example tasks, run by a real worker on `database: memory`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.core.models import PhaseState
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.examples import app, build_engine, enqueue_demo
from jobengine.settings import Settings
from jobengine.worker import Worker

FAST = {"concurrency": 8, "heartbeat_every": 0.05, "lease_seconds": 5.0, "poll_interval": 0.05}


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    e = build_engine(Settings(database="memory"))
    async with e:
        yield e


@pytest.fixture
async def worker(engine: Engine) -> AsyncIterator[Worker]:
    w = engine.worker(**FAST)
    task = asyncio.create_task(w.run())
    yield w
    w.stop()
    w.stop()  # release at once whatever is left
    await asyncio.wait_for(task, 60)


def test_app_returns_a_fresh_engine_with_every_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./jobengine.yaml but the test's own
    monkeypatch.setenv("JOBENGINE_DATABASE", "memory")
    first, second = app(), app()
    assert first is not second and first.tasks is not second.tasks
    assert first.settings.database == "memory"  # app() reads settings at the edge, like the CLI
    assert first.tasks.names() == ["etl", "flaky", "hello", "publish", "resize_image", "verify"]
    etl = first.tasks.get("etl")
    assert etl is not None and etl.phase_names == ("extract", "transform", "load")


@pytest.mark.timeout(300)
async def test_every_demo_job_succeeds(engine: Engine, worker: Worker) -> None:
    demo = await enqueue_demo(engine)
    assert len(demo) == 7
    done = {j.id: await engine.wait_for(j.id, timeout=30) for j in demo}
    assert {j.state for j in done.values()} == {JobState.SUCCEEDED}
    by_task = {j.task: j for j in done.values()}

    assert by_task["etl"].result == {
        "extract": {"rows": 20},
        "transform": {"total": sum(range(20)), "resumed_from": 0},
        "load": {"loaded": 20, "total": sum(range(20))},
    }
    transform = by_task["etl"].phases[1]
    assert transform.state is PhaseState.SUCCEEDED and transform.checkpoint == {"position": 20, "total": 190}
    assert by_task["resize_image"].result == {"resized": 6, "size": [320, 240]}
    assert by_task["flaky"].attempt <= 3  # max_failures 2: it may fail twice, never a third time
    verify, publish = by_task["verify"], by_task["publish"]
    assert publish.started_at is not None and verify.finished_at is not None
    assert publish.started_at >= verify.finished_at

    again = await enqueue_demo(engine)  # idempotency keys: the same jobs, not new ones
    assert [j.id for j in again] == [j.id for j in demo]


async def test_the_sync_resize_task_stops_when_cancelled(engine: Engine, worker: Worker) -> None:
    job = await engine.enqueue("resize_image", {"images": 10_000, "delay": 0.01})
    async with asyncio.timeout(5):
        while (await engine.get_job(job.id)).state is not JobState.RUNNING:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    await engine.cancel(job.id)
    finished = await engine.wait_for(job.id, timeout=5)
    assert finished.state is JobState.CANCELLED


@pytest.mark.parametrize(
    ("task", "payload", "message"),
    [
        ("resize_image", {"images": "many"}, "payload.images: expected a number"),
        ("hello", ["not", "an", "object"], "payload: expected a JSON object"),
        ("flaky", {"fail_rate": 2}, "payload.fail_rate: expected a number from 0 to 1"),
    ],
)
async def test_a_bad_payload_is_dead_at_once(
    engine: Engine, worker: Worker, task: str, payload: object, message: str
) -> None:
    job = await engine.wait_for((await engine.enqueue(task, payload)).id, timeout=60)
    assert (job.state, job.attempt) == (JobState.DEAD, 1)
    assert message in job.errors[0].message


async def test_flaky_without_a_failure_cap_can_die(engine: Engine, worker: Worker) -> None:
    job = await engine.wait_for((await engine.enqueue("flaky", {"fail_rate": 1}, max_attempts=2)).id, timeout=60)
    assert job.state is JobState.DEAD
    assert [e.type for e in job.errors] == ["ConnectionError", "ConnectionError"]
