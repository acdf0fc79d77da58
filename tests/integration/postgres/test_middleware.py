"""Middleware on PostgreSQL: the enqueue hooks (one refusing a batch, which leaves nothing stored) and the
hooks around each attempt of an async and a sync task, in the order given."""

from __future__ import annotations

import asyncio

import pytest

from jobengine import Job, Middleware, NewJob
from jobengine.core.models import Json
from jobengine.core.retry import RetryPolicy
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext, SyncJobContext


class Log(Middleware):
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def before_enqueue(self, job: NewJob) -> None:
        if job.task == "refused":
            raise PermissionError("refused by middleware")
        self.calls.append(f"{self.name} before_enqueue {job.task}")

    async def after_enqueue(self, job: Job) -> None:
        self.calls.append(f"{self.name} after_enqueue {job.task}")

    def before_run(self, job: Job) -> None:
        self.calls.append(f"{self.name} before_run {job.task} {job.attempt}")

    async def after_run(self, job: Job, result: Json) -> None:
        self.calls.append(f"{self.name} after_run {job.task} {result}")

    def on_retry(self, job: Job, error: BaseException, retry_at: float) -> None:
        self.calls.append(f"{self.name} on_retry {job.task} {error}")

    def on_dead(self, job: Job, error: BaseException) -> None:
        self.calls.append(f"{self.name} on_dead {job.task} {error}")

    def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
        self.calls.append(f"{self.name} after_attempt {job.task} {outcome}")


async def test_hooks_run_in_order_around_enqueue_and_each_attempt(postgres_dsn: str) -> None:
    calls: list[str] = []
    settings = Settings(database=postgres_dsn, poll_interval=0.2)
    engine = Engine.from_settings(settings, middleware=[Log("a", calls), Log("b", calls)])

    @engine.task()
    async def double(ctx: JobContext, n: int) -> int:
        return 2 * n

    @engine.task(max_attempts=2, retry=RetryPolicy(base=0.01, cap=0.02))
    def broken(ctx: SyncJobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    async with engine:
        with pytest.raises(PermissionError, match="refused by middleware"):
            await engine.enqueue_many([engine.new_job("double", {"n": 1}), engine.new_job("refused")])
        assert await engine.list_jobs() == [] and calls == ["a before_enqueue double", "b before_enqueue double"]
        calls.clear()

        jobs = [await double.enqueue(21), await broken.enqueue()]
        worker = engine.worker(poll_interval=0.2)
        running = asyncio.create_task(worker.run())
        done = [await engine.wait_for(j.id, timeout=60) for j in jobs]
        worker.stop()
        async with asyncio.timeout(60):
            await running
    assert [(j.state, j.result) for j in done] == [(JobState.SUCCEEDED, 42), (JobState.DEAD, None)]
    assert calls[:8] == [
        "a before_enqueue double", "b before_enqueue double", "a after_enqueue double", "b after_enqueue double",
        "a before_enqueue broken", "b before_enqueue broken", "a after_enqueue broken", "b after_enqueue broken",
    ]  # fmt: skip
    ran = calls[8:]
    assert [c for c in ran if "double" in c] == [
        "a before_run double 1", "b before_run double 1", "a after_run double 42", "b after_run double 42",
        "a after_attempt double succeeded", "b after_attempt double succeeded",
    ]  # fmt: skip
    assert [c for c in ran if "broken" in c] == [
        "a before_run broken 1", "b before_run broken 1", "a on_retry broken attempt 1", "b on_retry broken attempt 1",
        "a after_attempt broken retry", "b after_attempt broken retry",
        "a before_run broken 2", "b before_run broken 2", "a on_dead broken attempt 2", "b on_dead broken attempt 2",
        "a after_attempt broken dead", "b after_attempt broken dead",
    ]  # fmt: skip
