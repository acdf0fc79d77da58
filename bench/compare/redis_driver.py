"""The standard workload on a Redis-broker job queue (runs in a comparison venv):
``python -m bench.compare.redis_driver phases <system> --url redis://127.0.0.1:6379/<db> --setting ...``.

The phases of ``bench/README.md`` exactly as :mod:`bench.phases` runs them on jobengine (the same collector,
producer loops and clocks): each phase starts with FLUSHDB of the given database (the caller claimed it for
this run alone). ``worker <system> ...`` is one worker process of the process and latency phases.
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
from dataclasses import asdict
from pathlib import Path

from bench.collector import Collector
from bench.compare.redis_systems import SINK, SYSTEMS, Producer, System
from bench.phases import PRODUCER, Measure, percentile

ROOT = Path(__file__).resolve().parents[2]


def flush(url: str) -> None:
    from redis import Redis

    conn = Redis.from_url(url)
    try:
        conn.flushdb()
    finally:
        conn.close()


def label(system: System, setting: str, processes: int) -> str:
    return f"{processes} procs x {system.name} {setting}"


class Workers:
    def __init__(self, args: argparse.Namespace, socket: str) -> None:
        self._cmd = [sys.executable, "-m", "bench.compare.redis_driver", "worker", args.system, "--url", args.url,
                     "--socket", socket, "--setting", args.setting]  # fmt: skip
        self._n, self._logdir = args.processes, args.logdir
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
    system = SYSTEMS[args.system]
    n, chunk, out = args.n, args.chunk, []
    who = label(system, args.setting, args.processes)
    batch = "jobs/s (chunks of 1,000)" if system.batch_api else "jobs/s (chunks of 1,000; no batch API)"

    flush(args.url)  # 1. enqueue batch
    producer = await system.producer(args.url)
    started = time.perf_counter()
    await _fill(producer, n, chunk)
    out.append(Measure("enqueue batch", batch, n / (time.perf_counter() - started), "jobs/s", PRODUCER))
    await producer.close()

    flush(args.url)  # 2. enqueue single, then 3. process on what it queued
    producer = await system.producer(args.url)
    started = time.perf_counter()
    for i in range(n):
        await producer.enqueue_one(i, time.time())
    out.append(Measure("enqueue single", "jobs/s (one call each)", n / (time.perf_counter() - started), "jobs/s"))
    with Collector() as collector:
        workers = Workers(args, collector.path)
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
    checks: tuple[tuple[str, str], ...] = (("duplicates", str(snap.duplicates)),)
    if not (arrived and drained):
        checks += (("TIMEOUT, jobs ran", f"{snap.distinct:,}/{n:,}"),)
    ok = arrived and drained
    out.append(Measure("process", "jobs/s (launch -> drained)", n / elapsed if ok else math.nan, "jobs/s", who, checks))
    out.append(Measure("process", "jobs/s steady (first -> last)", steady, "jobs/s", who))

    flush(args.url)  # 4. latency
    out += await latency(args, system, who)
    flush(args.url)
    return out


async def latency(args: argparse.Namespace, system: System, who: str) -> list[Measure]:
    producer = await system.producer(args.url)
    warm, total = args.warmup, round(args.rate * args.duration)
    with Collector() as collector:
        workers = Workers(args, collector.path)
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
    result = [Measure("latency", f"p{p} ms", percentile(ms, p), "ms", who) for p in (50, 90, 99)]
    result.append(Measure("latency", "max ms", max(ms) if ms else math.nan, "ms", who, checks))
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.compare.redis_driver")
    p.add_argument("what", choices=("phases", "worker"))
    p.add_argument("system", choices=sorted(SYSTEMS))
    p.add_argument("--url", required=True, help="redis://host:port/db: a database of this run alone")
    p.add_argument("--socket", help="worker: the collector's socket")
    p.add_argument("--setting", default="", help="the system's worker setting (see redis_systems.py)")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("-n", type=int, default=20_000)
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--logdir", default="/tmp")
    p.add_argument("--json", help="phases: write the measures here")
    args = p.parse_args(argv)
    if args.what == "worker":
        SINK.connect(args.socket)
        SYSTEMS[args.system].work(args.url, args.setting)
        return
    measures = asyncio.run(run(args))
    text = json.dumps([asdict(m) for m in measures])
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
