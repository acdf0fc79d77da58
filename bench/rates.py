"""How closely a rate-limited queue keeps its rate: ``python -m bench.rates``.

For each target rate (``--rates``, jobs per second), a fresh store and transport, one worker at its defaults
in this process, and more jobs queued than the rate can start in ``--seconds``: the worker runs for that
long and every start is timed. The bucket's burst is the product's default (one second of tokens) unless
``--burst`` names one (``--burst 1``: every start waits for its own token). The table gives the target and
the observed rate in the steady state (the starts after the first ``--settle`` seconds, which the initial
burst fills, over the time from the first of those to the last) and the ratio of the two.

Usage (from the project root)::

    .venv/bin/python -m bench.rates                                    # SQLite, database transport
    .venv/bin/python -m bench.rates --backend postgres --dsn postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python -m bench.rates --backend postgres --dsn ... --transport redis   # or nats
    .venv/bin/python -m bench.rates --burst 1                                         # a token per start
    .venv/bin/python -m bench.rates --rates 5,10 --seconds 5                          # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from bench.stores import fresh_store
from bench.transports import TRANSPORTS, fresh_queue
from jobengine.core.queue_config import QueueConfig
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext

QUEUE = "runner"  # a queue every transport of bench.transports configures


async def _measure(
    database: str, queue: str | None, rate: float, burst: int | None, seconds: float, settle: float
) -> dict[str, Any]:
    settings = Settings(database=database)
    if queue:
        from dataclasses import replace

        settings = replace(settings, queue=QueueConfig.load(json.loads(queue)))
    engine = Engine.from_settings(settings)
    starts: list[float] = []

    @engine.task(queue=QUEUE)
    async def bench_rate(ctx: JobContext) -> None:
        starts.append(time.monotonic())

    async with engine:
        await engine.flow.set_limits(QUEUE, rate=rate, burst=burst)
        jobs = int(rate * seconds * 1.5) + (burst or int(rate) + 1) + 10  # never runs dry
        for at in range(0, jobs, 1000):
            await engine.enqueue_many([engine.new_job("bench_rate", {"i": i}) for i in range(at, min(jobs, at + 1000))])
        worker = engine.worker()
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(seconds)
        worker.stop()
        await asyncio.wait_for(task, 60)
    steady = [t for t in starts if t >= starts[0] + settle] if starts else []
    span = steady[-1] - steady[0] if len(steady) > 1 else 0.0
    observed = (len(steady) - 1) / span if span > 0 else 0.0
    return {"rate": rate, "starts": len(starts), "observed": observed}


def one(backend: str, dsn: str | None, transport: str, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    store = fresh_store(backend, dsn, None)
    queue = fresh_queue(transport, None)
    try:
        return asyncio.run(_measure(store.database, queue.settings, rate, args.burst, args.seconds, args.settle))
    finally:
        store.cleanup()
        queue.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rates", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", help="PostgreSQL: a database to make fresh ones beside")
    parser.add_argument("--transport", choices=TRANSPORTS, default="database")
    parser.add_argument("--rates", default="5,10,50,200", help="target rates, jobs/s, comma-separated")
    parser.add_argument("--burst", type=int, default=None, help="bucket size [default: the product's, rate]")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds of starts left out at the beginning")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each rate runs")
    args = parser.parse_args()
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        result = one(args.backend, args.dsn, args.transport, rate, args)
        print(json.dumps(result), file=sys.stderr)
        rows.append(result)
    burst = "default (rate)" if args.burst is None else str(args.burst)
    print(f"\nrate limits: {args.backend} / {args.transport}, burst {burst}, one worker at its defaults, "
          f"{args.seconds:g} s per rate")  # fmt: skip
    print("| target jobs/s | observed jobs/s | observed / target | starts |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['rate']:g} | {r['observed']:.2f} | {r['observed'] / r['rate']:.2f} | {r['starts']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
