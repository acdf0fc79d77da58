"""Retention of runs through the engine: a retention pass (``RetentionService``, which calls
``Engine.runs.prune``) deletes runs that ended more than ``run_retention`` ago, with their segments, and
keeps younger ended runs and runs that have not ended, however old. The jobs of a deleted run stay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion, Job
from jobengine.core.runs import RunState
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.engine import Engine
from jobengine.errors import NotFound
from jobengine.services import RetentionService
from jobengine.settings import Settings

from .conftest import T0

pytestmark = pytest.mark.timeout(300)

RUN_RETENTION = 1000.0


@pytest.fixture
async def engine(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Engine]:
    settings = Settings(database=str(tmp_path / "runs.db"), run_retention=RUN_RETENTION, retention_interval=0.01)
    async with Engine.from_settings(settings, clock) as e:
        yield e


async def start_run(engine: Engine, name: str) -> tuple[str, Job]:
    """Trigger a one-job run of a schedule of its own and claim its job: (run id, the running job)."""
    await engine.schedules.create(ScheduleSpec(name=name, every=86_400, template=JobTemplate(task="work", queue=name)))
    run = await engine.schedules.trigger(name, reason="test")
    (job,) = await engine.transitions.fetch_jobs([name], 10, WorkerId("w"), 86_400)
    assert job.run_id == run.id and job.lease_token is not None
    return run.id, job


def done(job: Job) -> Completion:
    assert job.lease_token is not None
    return Completion(job.id, job.lease_token)


async def test_a_retention_pass_deletes_only_runs_that_ended_before_the_retention(
    engine: Engine, clock: ManualClock
) -> None:
    old_run, old_job = await start_run(engine, "old")
    running_run, _ = await start_run(engine, "running")  # as old, but never ends
    await engine.transitions.complete_jobs([done(old_job)])  # ends at T0
    clock.set(T0 + 500)
    young_run, young_job = await start_run(engine, "young")
    await engine.transitions.complete_jobs([done(young_job)])  # ends at T0 + 500
    assert (await engine.runs.get(old_run)).finished_at == T0
    assert (await engine.runs.get(young_run)).state is RunState.COMPLETED

    service = RetentionService(engine)
    clock.set(T0 + RUN_RETENTION)  # the old run ended exactly run_retention ago: not more, so it stays
    await service.run_once()
    assert (await engine.runs.get(old_run)).state is RunState.COMPLETED

    clock.set(T0 + RUN_RETENTION + 1)
    await service.start()  # the service's own loop, as `jobengine up` runs it
    try:
        async with asyncio.timeout(5.0):
            while service.passes < 2:  # noqa: ASYNC110 - a plain counter, polled
                await asyncio.sleep(0.01)
    finally:
        await service.stop()
    with pytest.raises(NotFound):
        await engine.runs.get(old_run)
    kept = {r.id: r.state for r in await engine.runs.list()}
    assert kept == {young_run: RunState.COMPLETED, running_run: RunState.RUNNING}
    assert len(await engine.runs.segments(young_run)) == 1
    assert (await engine.get_job(old_job.id)).run_id == old_run  # job retention has its own clock

    clock.set(T0 + 500 + RUN_RETENTION + 1)  # now the young one is old enough too; the running one stays
    await service.run_once()
    assert {r.id for r in await engine.runs.list()} == {running_run}
    assert await engine.runs.prune() == 0  # nothing left to delete
