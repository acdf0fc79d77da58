"""Single enqueue with a broker, from one producer and from several at once:
``python -m bench.enqueue_producers``.

``python -m bench``'s ``enqueue-single`` phase is one producer calling ``engine.enqueue`` one job after
another; a web server enqueues from many requests at once. This runs both on the README's broker setup (the
store records every job, the broker delivers): one engine, ``--producers`` tasks each calling
``await engine.enqueue(...)`` in turn for their share of ``-n`` jobs, after 50 unmeasured ones. The store is
a fresh SQLite file at ``synchronous=FULL`` (the default) or, with ``--dsn``, a fresh schema in that
PostgreSQL database (dropped after); the broker gets fresh streams (:mod:`bench.transports`). Every job's
message is published before the engine closes (not timed).

Usage (from the project root)::

    .venv/bin/python -m bench.enqueue_producers                              # redis, SQLite, 1 and 16
    .venv/bin/python -m bench.enqueue_producers --transport nats --producers 1,4,16,64
    .venv/bin/python -m bench.enqueue_producers --dsn postgresql://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from typing import Any

from bench.transports import fresh_queue, published
from bench.workload import TASK, make_engine, payload
from jobengine.core.queue_config import QueueConfig
from jobengine.engine import Engine
from jobengine.settings import Settings


async def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]


async def one_setting(queue: str, n: int, producers: int, dsn: str | None, tmp: str) -> float:
    """Jobs/s of ``producers`` concurrent producers enqueueing ``n`` jobs in all."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    if dsn:
        settings = Settings(database=dsn, postgres_schema=schema, queue=QueueConfig.load(json.loads(queue)))
        engine = Engine.from_settings(settings)

        @engine.task(name=TASK)
        async def bench_noop(ctx: Any) -> None:  # never run here: the producer only enqueues
            pass
    else:
        engine, _ = make_engine(os.path.join(tmp, f"{uuid.uuid4().hex[:8]}.db"), "FULL", queue)
    await engine.start()
    try:
        for i in range(50):
            await engine.enqueue(TASK, payload(i))
        share = n // producers

        async def produce(k: int) -> None:
            for i in range(share):
                await engine.enqueue(TASK, payload(k * share + i))

        started = time.perf_counter()
        await asyncio.gather(*(produce(k) for k in range(producers)))
        rate = share * producers / (time.perf_counter() - started)
        await published(engine)
        return rate
    finally:
        await engine.close()
        if dsn:
            await _drop_schema(dsn, schema)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.enqueue_producers", description=__doc__.split("\n\n")[0])
    p.add_argument("--transport", default="redis", choices=("redis", "nats"))
    p.add_argument("--broker-url", help="default: the local port")
    p.add_argument("--dsn", help="a PostgreSQL store (a fresh schema in this database); default: SQLite")
    p.add_argument("-n", type=int, default=3000, help="jobs per setting")
    p.add_argument("--producers", default="1,16", help="comma list of concurrent producers")
    p.add_argument("--runs", type=int, default=1, help="runs of every setting, interleaved")
    args = p.parse_args(argv)
    store = "postgres" if args.dsn else "sqlite FULL"
    print(f"{args.transport} + {store}, N={args.n:,}, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="jobengine-enqueue-") as tmp:
        for run in range(1, args.runs + 1):
            for producers in (int(x) for x in args.producers.split(",")):
                queue = fresh_queue(args.transport, args.broker_url)
                try:
                    assert queue.settings is not None
                    rate = asyncio.run(one_setting(queue.settings, args.n, producers, args.dsn, tmp))
                finally:
                    queue.cleanup()
                print(f"run {run}: {producers:>3} producer(s): {rate:8,.0f} jobs/s", flush=True)


if __name__ == "__main__":
    main()
