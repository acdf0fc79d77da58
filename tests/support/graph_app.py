"""An app for the graph kill test: ``jobengine worker --app tests.support.graph_app:app``.

Its tasks are the nodes of a fan-out / fan-in graph (``head`` -> 100 x ``leaf`` -> ``fanin``). Every
execution appends to a ledger file the engine knows nothing about (one ``os.write`` per line on an O_APPEND
file, so lines of concurrent processes never interleave)::

    start <job> <node> <attempt> <pid> <time>
    end <job> <node> <attempt> <pid> <time> <value>

An ``end`` line is written just before the task returns ``value``; a SIGKILL may still land between it and
the commit of the success, so the test compares the ledger with the attempt the store says succeeded.
The fan-in's ``value`` is ``<count>:<sum>`` of the parents' results it received.
Settings come from ``JOBENGINE_*``; the ledger path from ``LEDGER``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from jobengine.core.retry import RetryPolicy
from jobengine.engine import Engine
from jobengine.engine.handles import Task
from jobengine.settings import Settings
from jobengine.worker import JobContext

#: Enough attempts that a node killed on every try for the test's length never goes dead.
ATTEMPTS = 50


def record(*parts: object) -> None:
    line = " ".join(str(p) for p in parts) + "\n"
    fd = os.open(os.environ["LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def register(engine: Engine) -> dict[str, Task[Any, Any]]:
    """The three node tasks on ``engine`` (the test registers them too, to build the graph)."""
    retry = RetryPolicy(base=0.05, cap=0.2)

    @engine.task(max_attempts=ATTEMPTS, retry=retry)
    async def head(ctx: JobContext) -> int:
        record("start", ctx.job_id, "head", ctx.attempt, os.getpid(), time.time())
        record("end", ctx.job_id, "head", ctx.attempt, os.getpid(), time.time(), 1000)
        return 1000

    @engine.task(max_attempts=ATTEMPTS, retry=retry)
    async def leaf(ctx: JobContext, i: int, sleep: float) -> int:
        node = f"leaf{i}"
        record("start", ctx.job_id, node, ctx.attempt, os.getpid(), time.time())
        base = sum(int(v) for v in (await ctx.parent_results()).values())
        await asyncio.sleep(sleep)
        record("end", ctx.job_id, node, ctx.attempt, os.getpid(), time.time(), base + i)
        return base + i

    @engine.task(max_attempts=ATTEMPTS, retry=retry)
    async def fanin(ctx: JobContext) -> int:
        record("start", ctx.job_id, "fanin", ctx.attempt, os.getpid(), time.time())
        results = await ctx.parent_results()
        total = sum(int(v) for v in results.values())
        record("end", ctx.job_id, "fanin", ctx.attempt, os.getpid(), time.time(), f"{len(results)}:{total}")
        return total

    return {"head": head, "leaf": leaf, "fanin": fanin}


def app() -> Engine:
    engine = Engine.from_settings(Settings.load())
    register(engine)
    return engine
