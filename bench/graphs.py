"""Graphs of jobs at the product's defaults: ``python -m bench.graphs``.

Three measures, each run ``--runs`` times on a fresh store (a new SQLite file, a new PostgreSQL database
beside ``--dsn``), one worker at its defaults in this process, no-op tasks:

- **submit**: one ``engine.graphs.submit`` of a fan-out / fan-in graph (``chord``: n - 1 nodes, then one
  after all of them) of each size in ``--sizes`` (100, 1,000, 10,000 nodes): the call's wall time.
- **drain**: a ``--drain``-node (10,000) fan-out / fan-in from the submit call until its last node ended
  (that node's ``finished_at``), and the nodes per second that makes.
- **chain**: a ``--chain``-node (1,000) chain, ``chain(noop.s(), noop.s(), ...)``, beside the same chain
  of plain jobs, each with ``depends_on`` the one before, stored with one ``enqueue_many``: from the
  submit call until the last node ended, divided by the links (n - 1): what one link costs end to end.

Printed as tables (median and min-max over the runs), never asserted. Usage (from the project root)::

    .venv/bin/python -m bench.graphs                                    # SQLite
    .venv/bin/python -m bench.graphs --backend postgres --dsn postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python -m bench.graphs --runs 1 --sizes 100,1000 --drain 1000 --chain 200   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

from bench.stores import fresh_store
from jobengine.core.ids import JobId
from jobengine.core.queue_config import QueueConfig
from jobengine.engine import Engine
from jobengine.engine.canvas import chain, chord
from jobengine.engine.handles import Task
from jobengine.settings import Settings
from jobengine.worker import JobContext

T = TypeVar("T")

#: Seconds between reads of the last node's state while a graph runs.
_POLL = 0.05


def _engine(database: str, queue: str | None = None) -> tuple[Engine, Task[Any, Any]]:
    """An engine at the product's defaults and its no-op task. ``queue``: the ``queue:`` settings as JSON, a
    broker transport (see bench/transports.py); None keeps the database transport."""
    settings = Settings(database=database)
    if queue:
        settings = replace(settings, queue=QueueConfig.load(json.loads(queue)))
    engine = Engine.from_settings(settings)

    @engine.task
    async def noop(ctx: JobContext, i: int = 0) -> None:
        return None

    return engine, noop


async def _ended_at(engine: Engine, job_id: str, timeout: float) -> float:
    """The ``finished_at`` of ``job_id`` once it ended (the worker's own clock: no polling delay in it)."""
    async with asyncio.timeout(timeout):
        while True:
            (job,) = await engine.store.get_jobs([JobId(job_id)])
            if job.terminal:
                if job.final_state.value != "succeeded":
                    raise RuntimeError(f"the last node ended {job.final_state.value}")
                assert job.finished_at is not None
                return job.finished_at
            await asyncio.sleep(_POLL)


async def _with_worker(engine: Engine, body: Callable[[], Awaitable[float]]) -> float:
    worker = engine.worker()
    running = asyncio.create_task(worker.run())
    try:
        return await body()
    finally:
        worker.stop()
        async with asyncio.timeout(120):
            await running


async def _submit(database: str, sizes: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    engine, noop = _engine(database)
    async with engine:
        for n in sizes:
            graph = chord([noop.s(i) for i in range(n - 1)], noop.s())
            began = time.perf_counter()
            await engine.graphs.submit(graph)
            out[n] = time.perf_counter() - began
    return out


async def _drain(database: str, n: int, timeout: float) -> float:
    engine, noop = _engine(database)
    async with engine:
        graph = chord([noop.s(i) for i in range(n - 1)], noop.s())

        async def run() -> float:
            began = time.time()
            handle = await engine.graphs.submit(graph)
            status = await handle.wait(timeout)
            if status.state.value != "succeeded":
                raise RuntimeError(f"the graph ended {status.state.value}")
            nodes = (await handle.status(nodes=True)).nodes
            return max(n.job.finished_at or 0.0 for n in nodes) - began

        return await _with_worker(engine, run)


async def _chain_graph(database: str, n: int, timeout: float, queue: str | None = None) -> float:
    engine, noop = _engine(database, queue)
    async with engine:
        graph = chain(*(noop.s(i) for i in range(n)))

        async def run() -> float:
            began = time.time()
            handle = await engine.graphs.submit(graph)
            status = await handle.status(nodes=True)
            tail = max(status.nodes, key=lambda node: node.job.id)  # node ids grow along the chain
            return await _ended_at(engine, tail.job.id, timeout) - began

        return await _with_worker(engine, run) / (n - 1)


async def _chain_jobs(database: str, n: int, timeout: float, queue: str | None = None) -> float:
    engine, _ = _engine(database, queue)
    async with engine:

        async def run() -> float:
            jobs = [engine.new_job("noop", {"i": 0})]
            for i in range(1, n):
                jobs.append(engine.new_job("noop", {"i": i}, depends_on=[jobs[-1].id]))
            began = time.time()
            await engine.enqueue_many(jobs)
            return await _ended_at(engine, jobs[-1].id, timeout) - began

        return await _with_worker(engine, run) / (n - 1)


def _fresh(backend: str, dsn: str | None, measure: Callable[[str], Coroutine[Any, Any, T]]) -> T:
    store = fresh_store(backend, dsn, None)
    try:
        return asyncio.run(measure(store.database))
    finally:
        store.cleanup()


def _spread(values: list[float], scale: float, fmt: str) -> tuple[str, str]:
    median = statistics.median(values) * scale
    return format(median, fmt), f"{min(values) * scale:{fmt}} - {max(values) * scale:{fmt}}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.graphs", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", help="PostgreSQL: a database to make fresh ones beside")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="100,1000,10000", help="nodes of the graphs whose submit is timed")
    parser.add_argument("--drain", type=int, default=10_000, help="nodes of the graph run to its end (0: none)")
    parser.add_argument("--chain", type=int, default=1_000, help="nodes of the chains (0: none)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    submits: dict[int, list[float]] = {n: [] for n in sizes}
    drains: list[float] = []
    links: dict[str, list[float]] = {"graph": [], "depends_on": []}
    for run in range(args.runs):
        # Interleaved, run by run: a drift of the machine hits every measure alike.
        for n, took in _fresh(args.backend, args.dsn, lambda db: _submit(db, sizes)).items():
            submits[n].append(took)
        if args.chain:
            links["graph"].append(_fresh(args.backend, args.dsn, lambda db: _chain_graph(db, args.chain, args.timeout)))
            links["depends_on"].append(
                _fresh(args.backend, args.dsn, lambda db: _chain_jobs(db, args.chain, args.timeout))
            )
        if args.drain:
            drains.append(_fresh(args.backend, args.dsn, lambda db: _drain(db, args.drain, args.timeout)))
        print(json.dumps({"run": run + 1, "submit": {str(n): v[-1] for n, v in submits.items()},
                          "drain": drains[-1:], "link": {k: v[-1:] for k, v in links.items()}}),
              file=sys.stderr)  # fmt: skip

    print(f"\ngraphs: {args.backend}, product defaults, one worker in-process, no-op tasks, {args.runs} run(s)")
    print("| measure | median | min - max |")
    print("|---|---:|---:|")
    for n, values in submits.items():
        median, spread = _spread(values, 1000, ".0f")
        print(f"| submit {n:,} nodes (chord), ms | {median} | {spread} |")
    if drains:
        median, spread = _spread(drains, 1, ".1f")
        print(f"| run {args.drain:,} nodes (chord) to the end, s | {median} | {spread} |")
        rate, rates = _spread([args.drain / d for d in drains], 1, ".0f")
        print(f"| run {args.drain:,} nodes (chord), nodes/s | {rate} | {rates} |")
    for kind, values in links.items():
        if values:
            median, spread = _spread(values, 1000, ".2f")
            what = "graph chain" if kind == "graph" else "plain jobs, depends_on"
            print(f"| one link of a {args.chain:,}-node {what}, ms | {median} | {spread} |")
    if links["graph"]:
        overhead = [g - d for g, d in zip(links["graph"], links["depends_on"], strict=True)]
        median, spread = _spread(overhead, 1000, ".2f")
        print(f"| graph overhead per link (graph - depends_on, same run), ms | {median} | {spread} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
