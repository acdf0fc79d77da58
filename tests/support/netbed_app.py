"""The app of the network test bed's workers (tests/acceptance/test_netbed.py): every execution writes
ledger lines to a file of its host, ``$NETBED_LEDGER/<$NETBED_HOST>.txt``, on the machine's own disk, so a
partitioned host still records what it runs. One ``os.write`` per line on an O_APPEND file:
``start <job> <attempt> <pid> <time> <run>`` and ``end <job> <attempt> <pid> <time> <run>`` (``run`` is the
job's run id, ``-`` for a job no schedule fired). A job sleeps ``payload["sleep"]`` seconds (0.05 by
default). Settings come from ``JOBENGINE_*``, as the deploy files give them.
"""

from __future__ import annotations

import asyncio
import os
import time

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext
from tests.support.ledger_app import append


def record(*parts: object) -> None:
    append(os.path.join(os.environ["NETBED_LEDGER"], os.environ["NETBED_HOST"] + ".txt"), *parts)


def app() -> Engine:
    engine = Engine.from_settings(Settings.load())

    @engine.task(max_attempts=10)
    async def mark(ctx: JobContext) -> None:
        run = ctx.job.run_id or "-"
        record("start", ctx.job_id, ctx.attempt, os.getpid(), time.time(), run)
        payload = ctx.payload if isinstance(ctx.payload, dict) else {}
        await asyncio.sleep(float(payload.get("sleep", 0.05)))
        record("end", ctx.job_id, ctx.attempt, os.getpid(), time.time(), run)

    return engine
