"""An incremental run whose worker is SIGKILLed halfway, for real, on SQLite and PostgreSQL: the cursor stays
where it was, and the next incremental run redoes only the items no segment finished."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobengine.core.run_requests import RunMode, RunRequest
from jobengine.core.runs import RunState
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings

from .conftest import Procs

FAST = {
    "JOBENGINE_LEASE_SECONDS": "2",
    "JOBENGINE_RESCUE_INTERVAL": "0.5",
    "JOBENGINE_HEARTBEAT_INTERVAL": "0.5",
    "JOBENGINE_POLL_INTERVAL": "0.2",
    "JOBENGINE_WORKER_CONCURRENCY": "1",
}


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def items_of(engine: Engine, run_id: str, outcome: JobState | None = JobState.SUCCEEDED) -> list[Any]:
    """The items of the run's segments that ended as ``outcome`` (None: every segment)."""
    segments = await engine.runs.segments(run_id)
    jobs = await engine.get_jobs([s.job_id for s in segments if outcome is None or s.outcome is outcome])
    return [item for j in jobs for item in j.payload["items"]]  # type: ignore[index]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_killed_run_leaves_the_cursor_and_the_next_redoes_only_the_rest(
    procs: Procs, backend: str, request: pytest.FixtureRequest
) -> None:
    procs.env.update(FAST)
    if backend == "postgres":
        procs.env["JOBENGINE_DATABASE"] = request.getfixturevalue("postgres_dsn")
    async with Engine.from_settings(Settings(database=procs.env["JOBENGINE_DATABASE"])) as engine:
        first = RunRequest(task="work", items=tuple(range(1000)), segment_size=100)
        full = await engine.runs.start(first)
        worker = procs.worker()

        async def ended(run_id: str) -> bool:
            return (await engine.runs.get(run_id)).ended

        await until(lambda: ended(full.id), "the full run")
        assert (await engine.runs.get(full.id)).state is RunState.COMPLETED
        stream = engine.store.scheduling()
        assert (await stream.get_cursor("default", first.stream)).value == 999  # type: ignore[union-attr]

        grown = RunRequest(task="work", items=tuple(range(1100)), segment_size=2, mode=RunMode.INCREMENTAL)
        run = await engine.runs.start(grown)
        assert run.items == 100

        async def halfway() -> bool:
            return (await engine.runs.get(run.id)).summary.succeeded >= 10

        await until(halfway, "half the segments")
        procs.kill(worker)
        did = await items_of(engine, run.id)
        assert 20 <= len(did) < 100
        await engine.runs.cancel(run.id, reason="the workers were lost")
        assert (await stream.get_cursor("default", grown.stream)).value == 999  # type: ignore[union-attr]

        procs.worker()  # rescues the job the dead worker held; the cancelled run's jobs never run again

        async def quiet() -> bool:
            return all(s.outcome is not None for s in await engine.runs.segments(run.id))

        await until(quiet, "the killed run's segments to end")
        did = await items_of(engine, run.id)
        rest = await engine.runs.start(grown)
        assert rest.items == 100 - len(did)
        await until(lambda: ended(rest.id), "the next incremental run")
        redone = await items_of(engine, rest.id, None)
        assert sorted(did + redone) == list(range(1000, 1100))
        assert (await engine.runs.get(rest.id)).state is RunState.COMPLETED
        assert (await stream.get_cursor("default", grown.stream)).value == 1099  # type: ignore[union-attr]
