"""The tasks and the worker the HTTP graph tests share (``test_graphs_api`` over raw HTTP, ``test_sdk_graphs``
through the SDK): each records its calls in the list :func:`register` returns, so a test sees what ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from jobengine import JobContext, NonRetryable
from jobengine.engine import Engine

#: Seconds a graph may take to end, and a worker to stop, on a loaded machine.
TIMEOUT = 60.0


def register(engine: Engine) -> list[str]:
    """Register the nodes' tasks on ``engine``; the calls they make, in order (``"number:<n>"``, ``"total"``,
    ``"boom"``, ``"cleanup"``, ``"slow"``). ``boom`` fails for good until the test appends ``"fixed"``;
    ``slow`` runs until it is cancelled."""
    calls: list[str] = []

    @engine.task
    async def number(n: int) -> int:
        calls.append(f"number:{n}")
        return n

    @engine.task
    async def total(ctx: JobContext) -> int:
        calls.append("total")
        return sum((await ctx.parent_results()).values())

    @engine.task(max_attempts=1)
    async def boom() -> None:
        calls.append("boom")
        if "fixed" not in calls:
            raise NonRetryable("boom")

    @engine.task
    async def cleanup(ctx: JobContext) -> list[str]:
        calls.append("cleanup")
        return sorted(await ctx.parent_results())

    @engine.task
    async def slow(ctx: JobContext) -> None:
        calls.append("slow")
        for _ in range(int(TIMEOUT / 0.05)):
            ctx.raise_if_cancelled()
            await asyncio.sleep(0.05)

    return calls


@asynccontextmanager
async def running_worker(engine: Engine) -> AsyncIterator[None]:
    """A worker running the nodes while the block runs (the tasks registered before it starts)."""
    worker = engine.worker(concurrency=4, poll_interval=0.05, heartbeat_every=0.2)
    running = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        worker.stop()
        await asyncio.wait_for(running, TIMEOUT)
