"""A jobengine worker process for the PostgreSQL chaos test: ``python -m tests.support.pg_chaos_worker``.

It runs task ``chaos`` (sleep ``payload["sleep"]`` seconds) with a short lease, and appends every
execution's start and end to the ledger file ``LEDGER`` (one ``os.write`` per line on an O_APPEND file, so
lines of concurrent processes never interleave): ``start <job> <pid> <attempt> <time>`` and
``end <job> <pid> <attempt> <time>``. SIGTERM stops it gracefully; the test SIGKILLs it at random.

Environment: ``JOBENGINE_DATABASE`` (a postgresql:// DSN), ``LEDGER``, optionally ``CHAOS_CONCURRENCY``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

from jobengine.core.retry import RetryPolicy
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext


def record(*parts: object) -> None:
    fd = os.open(os.environ["LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(str(p) for p in parts) + "\n").encode())
    finally:
        os.close(fd)


async def main() -> None:
    settings = Settings(
        database=os.environ["JOBENGINE_DATABASE"],
        lease_seconds=2.0,
        heartbeat_interval=0.4,
        rescue_interval=0.5,
        poll_interval=0.5,
        grace_period=5.0,
        worker_concurrency=int(os.environ.get("CHAOS_CONCURRENCY", "8")),
        postgres_pool_size=4,
    )
    engine = Engine.from_settings(settings)
    pid = os.getpid()

    @engine.task(max_attempts=1000, retry=RetryPolicy(base=0.05, cap=0.2))
    async def chaos(ctx: JobContext) -> int:
        record("start", ctx.job_id, pid, ctx.attempt, time.time())
        await asyncio.sleep(float(ctx.payload["sleep"]))
        record("end", ctx.job_id, pid, ctx.attempt, time.time())
        return int(ctx.payload["i"])

    async with engine:
        worker = engine.worker()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s worker {os.getpid()} %(levelname)s %(message)s")
    asyncio.run(main())
