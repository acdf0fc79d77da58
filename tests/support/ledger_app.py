"""An app for multi-process tests. Every execution writes to a ledger file kept outside the engine.

Ledger lines (one ``os.write`` each on an O_APPEND file, so lines from processes never interleave):
``start <job> <pid> <attempt> <time>``, ``end <job> <pid> <attempt> <time>``,
``checkpoint-seen <job> <pid> <json>``, ``phase <job> <pid> <name>``.
Settings come from ``JOBENGINE_*`` (database, lease, intervals); the ledger path from ``LEDGER``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from jobengine.core.retry import RetryPolicy
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext


def append(path: str, *parts: object) -> None:
    """``parts`` as one line of ``path``, in one ``os.write`` on an O_APPEND file: lines that processes
    write at once never interleave."""
    line = " ".join(str(p) for p in parts) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def record(*parts: object) -> None:
    append(os.environ["LEDGER"], *parts)


def app() -> Engine:
    engine = Engine.from_settings(Settings.load())

    @engine.task(max_attempts=20, retry=RetryPolicy(base=0.05, cap=0.2))
    async def work(ctx: JobContext) -> int:
        record("start", ctx.job_id, os.getpid(), ctx.attempt, time.time())
        await asyncio.sleep(float(ctx.payload.get("sleep", 0.1)))
        record("end", ctx.job_id, os.getpid(), ctx.attempt, time.time())
        return int(ctx.payload.get("i", 0))

    async def first(ctx: JobContext) -> str:
        record("phase", ctx.job_id, os.getpid(), "first")
        return "first-result"

    async def second(ctx: JobContext) -> int:
        record("phase", ctx.job_id, os.getpid(), "second")
        record("checkpoint-seen", ctx.job_id, os.getpid(), json.dumps(ctx.checkpoint))
        step = (ctx.checkpoint or {}).get("step", 0)
        while step < 10:
            step += 1
            await ctx.save_checkpoint({"step": step, "seen_first": ctx.results["first"]})
            await asyncio.sleep(float(ctx.payload.get("step_sleep", 0.2)))
        return step

    async def third(ctx: JobContext) -> str:
        record("phase", ctx.job_id, os.getpid(), "third")
        return "done"

    engine.add_task("phased", phases=[first, second, third], max_attempts=5)
    return engine
