"""The standard workload on another job queue (runs in the comparison venv): ``python -m bench.compare.driver``.

``phases <system> --dsn ... --json out.json`` runs the phases of ``bench/README.md`` on ``system`` exactly as
:mod:`bench.phases` runs them on jobengine (same collector, same producer loops, fresh database per phase)
and writes the measures as JSON. ``worker <system> ...`` is one worker process of the process and latency
phases.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from bench.collector import Collector
from bench.compare.systems import SYSTEMS, Producer, System
from bench.phases import PRODUCER, Measure, percentile
from bench.postgres import _as_url
from bench.workload import Sink

ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def fresh_database(admin_dsn: str, system: System) -> AsyncIterator[str]:
    name = f"jobengine_compare_{os.urandom(4).hex()}"
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"'.encode())
    dsn = _as_url(make_conninfo(admin_dsn, dbname=name))  # a URL: asyncpg takes no key=value DSN
    try:
        await system.install(dsn)
        yield dsn
    finally:
        async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


class Workers:
    def __init__(self, system: str, dsn: str, socket: str, setting: int, processes: int, logdir: str) -> None:
        self._cmd = [sys.executable, "-m", "bench.compare.driver", "worker", system, "--dsn", dsn,
                     "--socket", socket, "--setting", str(setting)]  # fmt: skip
        self._n, self._logdir = processes, logdir
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for k in range(self._n):
            log = open(os.path.join(self._logdir, f"worker{k}.log"), "ab")  # noqa: SIM115 - the child keeps it
            self._procs.append(subprocess.Popen(self._cmd, env=env, stdout=log, stderr=log, start_new_session=True))

    async def stop(self) -> None:
        for p in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGINT)
        for p in self._procs:
            try:
                await asyncio.to_thread(p.wait, 30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                await asyncio.to_thread(p.wait)
        self._procs.clear()


async def _drained(producer: Producer, timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if await producer.active() == 0:
            return True
        await asyncio.sleep(0.002)
    return False


async def _fill(producer: Producer, n: int, chunk: int) -> None:
    for start in range(0, n, chunk):
        await producer.enqueue_batch([(i, time.time()) for i in range(start, min(n, start + chunk))])


async def run(args: argparse.Namespace) -> list[Measure]:
    """The selected phases, as :func:`bench.phases.run_round` runs them: each enqueue phase on a fresh
    database; the process phase works the jobs the last enqueue phase left (or, if none ran, a fresh
    database filled with the batch API, unmeasured); the latency phase on a fresh database."""
    system, phases = SYSTEMS[args.system], args.phases.split(",")
    n, chunk, out = args.n, args.chunk, []
    label = f"{args.processes}x {system.knob} {args.setting}"
    async with contextlib.AsyncExitStack() as stack:
        queued: str | None = None
        if "enqueue-batch" in phases:
            queued = await stack.enter_async_context(fresh_database(args.dsn, system))
            producer = await system.producer(queued)
            started = time.perf_counter()
            await _fill(producer, n, chunk)
            out.append(Measure("enqueue batch", f"jobs/s (chunks of {chunk:,})", n / (time.perf_counter() - started),
                               "jobs/s", PRODUCER))  # fmt: skip
            await producer.close()
        if "enqueue-single" in phases:
            queued = await stack.enter_async_context(fresh_database(args.dsn, system))
            producer = await system.producer(queued)
            started = time.perf_counter()
            for i in range(n):
                await producer.enqueue_one(i, time.time())
            out.append(Measure("enqueue single", "jobs/s (one call each)", n / (time.perf_counter() - started),
                               "jobs/s", PRODUCER))  # fmt: skip
            await producer.close()
        if "process" in phases:
            if queued is None:
                queued = await stack.enter_async_context(fresh_database(args.dsn, system))
                producer = await system.producer(queued)
                await _fill(producer, n, chunk)
                await producer.close()
            out += await process(args, system, queued, label)
    if "latency" in phases:
        async with fresh_database(args.dsn, system) as dsn:
            out += await latency(args, system, dsn, label)
    return out


async def process(args: argparse.Namespace, system: System, dsn: str, label: str) -> list[Measure]:
    """Launch the workers on the N queued jobs; stop the clock when all N reported and none is left."""
    n = args.n
    producer = await system.producer(dsn)
    with Collector() as collector:
        workers = Workers(args.system, dsn, collector.path, args.setting, args.processes, args.logdir)
        started = time.perf_counter()
        workers.start()
        try:
            arrived = await asyncio.to_thread(collector.wait_for, n, args.timeout)
            drained = arrived and await _drained(producer, args.timeout)
            elapsed = time.perf_counter() - started
        finally:
            await workers.stop()
        snap = collector.snapshot()
    await producer.close()
    steady = math.nan
    if snap.first_start is not None and snap.last_start is not None and snap.last_start > snap.first_start:
        steady = snap.distinct / (snap.last_start - snap.first_start)
    checks = (("duplicates", str(snap.duplicates)),)
    if not (arrived and drained):
        checks += (("TIMEOUT, jobs ran", f"{snap.distinct:,}/{n:,}"),)
    return [
        Measure("process", "jobs/s (launch -> drained)", n / elapsed if arrived and drained else math.nan,
                "jobs/s", label, checks),
        Measure("process", "jobs/s steady (first -> last)", steady, "jobs/s", label),
    ]  # fmt: skip


async def latency(args: argparse.Namespace, system: System, dsn: str, label: str) -> list[Measure]:
    producer = await system.producer(dsn)
    warm, total = args.warmup, round(args.rate * args.duration)
    with Collector() as collector:
        workers = Workers(args.system, dsn, collector.path, args.setting, args.processes, args.logdir)
        workers.start()
        try:
            for i in range(warm):
                await producer.enqueue_one(i, time.time())
            if not await asyncio.to_thread(collector.wait_for, warm, args.timeout):
                raise SystemExit("latency: the warm-up jobs did not run")
            await asyncio.sleep(1.0)
            interval, behind, begun = 1.0 / args.rate, 0, time.perf_counter()
            for k in range(total):
                delay = begun + k * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -interval:
                    behind += 1
                await producer.enqueue_one(warm + k, time.time())
            produced = time.perf_counter() - begun
            arrived = await asyncio.to_thread(collector.wait_for, warm + total, args.timeout)
        finally:
            await workers.stop()
        snap = collector.snapshot(only=range(warm, warm + total))
    await producer.close()
    ms = [1000 * x for x in snap.latencies]
    checks = (("offered jobs/s", f"{total / produced:,.0f}"), ("enqueue calls > 1 slot late", str(behind)),
              ("duplicates", str(snap.duplicates)))  # fmt: skip
    if not arrived:
        checks += (("TIMEOUT, jobs ran", f"{snap.distinct:,}/{total:,}"),)
    result = [Measure("latency", f"p{p} ms", percentile(ms, p), "ms", label) for p in (50, 90, 99)]
    result.append(Measure("latency", "max ms", max(ms) if ms else math.nan, "ms", label, checks))
    return result


def worker(args: argparse.Namespace) -> None:
    sink = Sink()
    sink.connect(args.socket)
    asyncio.run(SYSTEMS[args.system].work(args.dsn, sink, args.setting))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.compare.driver")
    p.add_argument("what", choices=("phases", "worker"))
    p.add_argument("system", choices=sorted(SYSTEMS))
    p.add_argument("--dsn", required=True, help="phases: an admin DSN (databases are created); worker: the DSN")
    p.add_argument("--socket", help="worker: the collector's socket")
    p.add_argument("--setting", type=int, default=16, help="the system's worker knob (batch / concurrency)")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--logdir", default="/tmp")
    p.add_argument("--phases", default="enqueue-batch,enqueue-single,process,latency")
    p.add_argument("--json", help="phases: write the measures here")
    args = p.parse_args(argv)
    if args.what == "worker":
        worker(args)
        return
    measures = asyncio.run(run(args))
    text = json.dumps([asdict(m) for m in measures])
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
