"""What an in-process task hands back (a result, an exception's message, a checkpoint, a progress message)
is checked against core.bounds before a store sees it, on SQLite and PostgreSQL: a result no backend can
store fails the attempt naming ``result``; an exception whose text no backend can store is recorded with
U+FFFD in its place. Either way the job ends and reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.core import codec
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import InvalidJob
from jobengine.serialize import job_to_json
from jobengine.settings import Settings
from jobengine.worker import JobContext


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    database = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "w.db")
    async with Engine.from_settings(Settings(database=database)) as e:
        yield e


async def test_what_a_task_hands_back_is_checked_and_the_job_reads(engine: Engine) -> None:
    refused: list[str] = []

    @engine.task(max_attempts=1)
    async def bad_result(ctx: JobContext) -> object:
        return {"a": ["ok", "\ud800"]}

    @engine.task(max_attempts=1)
    async def bad_error(ctx: JobContext) -> None:
        raise ValueError("lone \udc00 and NUL \x00")

    @engine.task(max_attempts=1)
    async def bad_reports(ctx: JobContext) -> str:
        try:
            ctx.progress(0.5, "\ud800")
        except InvalidJob as exc:
            refused.append(exc.field)
        try:
            await ctx.save_checkpoint({"k": "\x00"})
        except InvalidJob as exc:
            refused.append(exc.field)
        return "fine"

    worker = engine.worker(concurrency=3, poll_interval=0.05)
    jobs = [await engine.enqueue(t) for t in ("bad_result", "bad_error", "bad_reports")]
    run = asyncio.create_task(worker.run())
    try:
        done = [await engine.wait_for(j.id, timeout=60) for j in jobs]
    finally:
        worker.stop()
        await asyncio.wait_for(run, 30)
    result, error, reports = done
    assert result.state is JobState.DEAD and result.errors[-1].message.startswith("result: must be valid Unicode")
    assert error.state is JobState.DEAD and error.errors[-1].message == "lone \ufffd and NUL \ufffd"
    assert reports.state is JobState.SUCCEEDED and reports.result == "fine"
    assert refused == ["message", "checkpoint"]
    for job in await engine.get_jobs([j.id for j in jobs]):
        codec.dumpb(job_to_json(job))  # every one reads and serialises
