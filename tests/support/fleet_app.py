"""An app whose tasks are chosen by the environment, for fleets of workers running different code (a rolling
deploy): ``FLEET_TASKS=a,b`` registers tasks ``a`` and ``b``. Each execution writes ledger lines (one
``os.write`` each on an O_APPEND file): ``start <job> <pid> <attempt> <task> <time>`` and ``end ...``.
A job sleeps ``payload["sleep"]`` seconds, or ``payload["again"]`` when the ledger shows it started before.
Settings come from ``JOBENGINE_*`` and ``./jobengine.yaml``; the ledger path from ``LEDGER``.
"""

from __future__ import annotations

import asyncio
import os
import time

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext


def record(*parts: object) -> None:
    line = " ".join(str(p) for p in parts) + "\n"
    fd = os.open(os.environ["LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def started_before(job_id: str) -> bool:
    try:
        with open(os.environ["LEDGER"]) as ledger:
            return any(line.split()[:2] == ["start", job_id] for line in ledger)
    except FileNotFoundError:
        return False


def app() -> Engine:
    engine = Engine.from_settings(Settings.load())
    for name in os.environ.get("FLEET_TASKS", "a").split(","):

        async def run(ctx: JobContext, task: str = name) -> None:
            payload = ctx.payload or {}
            again = "again" in payload and started_before(ctx.job_id)
            record("start", ctx.job_id, os.getpid(), ctx.attempt, task, time.time())
            await asyncio.sleep(float(payload["again"] if again else payload.get("sleep", 0.01)))
            record("end", ctx.job_id, os.getpid(), ctx.attempt, task, time.time())

        engine.add_task(name, run, max_attempts=5)
    return engine
