"""What a PostgreSQL worker does between its engine's start and its first job: ``python -m bench.first_claim``.

A fresh database (next to the one ``--dsn`` names, dropped after) gets ``--jobs`` queued benchmark jobs and
its schema migrated; then, in this process, an engine is opened on it and a worker at the product's defaults
started, and every statement and connection begun before the first job's body ran is printed with its start
and end (ms after the engine's start), then how many there were. Round trips, not CPU, are what this shows:
on a busy machine the times swing, the order and the count do not. ``--runs`` repeats it, each on its own
engine (the same database; the jobs left are enough for each run).

    .venv/bin/python -m bench.first_claim --dsn postgresql://postgres@127.0.0.1/postgres --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import psycopg

from bench.postgres import fresh_database
from bench.workload import TASK, make_engine, payload


class Trace:
    """Statements and connections, timed from :meth:`start`."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.spans: list[tuple[float, float, str]] = []

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.spans.clear()

    def install(self) -> None:
        execute, connect = psycopg.AsyncCursor.execute, psycopg.AsyncConnection.connect.__func__  # type: ignore[attr-defined]
        trace = self

        async def traced_execute(cur: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            text = query.decode() if isinstance(query, bytes) else str(query)
            began = time.perf_counter()
            try:
                return await execute(cur, query, params, **kw)
            finally:
                trace.spans.append((began - trace.t0, time.perf_counter() - trace.t0, " ".join(text.split())[:70]))

        async def traced_connect(cls: Any, *a: Any, **kw: Any) -> Any:
            began = time.perf_counter()
            try:
                return await connect(cls, *a, **kw)
            finally:
                trace.spans.append((began - trace.t0, time.perf_counter() - trace.t0, "(connect)"))

        psycopg.AsyncCursor.execute = traced_execute  # type: ignore[method-assign,assignment]
        psycopg.AsyncConnection.connect = classmethod(traced_connect)  # type: ignore[method-assign,assignment]


async def one(database: str, trace: Trace) -> None:
    engine, sink = make_engine(database)
    ran = asyncio.Event()
    sink.send = lambda i, t: ran.set()  # type: ignore[method-assign]
    trace.start()
    async with engine:
        worker = engine.worker()
        task = asyncio.create_task(worker.run())
        await ran.wait()
        first = time.perf_counter() - trace.t0
        worker.stop()
        await task
    before = sorted(s for s in trace.spans if s[0] < first)
    for began, ended, what in before:
        print(f"{1000 * began:8.1f} -> {1000 * ended:8.1f} ms  {what}")
    statements = sum(1 for s in before if s[2] != "(connect)")
    print(f"first job {1000 * first:.1f} ms after the engine's start; {statements} statements and "
          f"{len(before) - statements} connections begun before it\n")  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    database, drop = fresh_database(args.dsn)
    try:
        engine, _ = make_engine(database)
        async with engine:
            await engine.enqueue_many([engine.new_job(TASK, payload(i)) for i in range(args.jobs)])
        trace = Trace()
        trace.install()
        for _ in range(args.runs):
            await one(database, trace)
    finally:
        drop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.first_claim", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", required=True, help="postgresql://user@127.0.0.1/db")
    p.add_argument("--jobs", type=int, default=1000, help="jobs queued before the first run")
    p.add_argument("--runs", type=int, default=1)
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
