"""Microbenchmarks of the SQLite store alone (no engine, no worker runtime), in CPU time as well as wall time.

    .venv/bin/python -m bench.store_micro                       # every case, 5 repeats, medians
    .venv/bin/python -m bench.store_micro --cases insert,cycle --repeats 7 --jobs 20000
    .venv/bin/python -m bench.store_micro --synchronous FULL --worker-synchronous FULL   # the old durability

Cases (each on a fresh file, migrations untimed):

- ``insert``: ``insert_jobs`` of ``--jobs`` prebuilt jobs in chunks of ``--chunk`` (1000), as ``enqueue_many``
  does (building the NewJob values is not timed: it is the caller's cost).
- ``cycle``: one process claims ``--claim`` jobs at a time and completes them (what a worker's pump and
  flusher send), until the queue is empty.
- ``empty``: ``fetch_jobs`` on a queue with nothing runnable (what every woken worker does when another one
  was faster), ``--empty-fetches`` times.
- ``contend``: ``--procs`` processes run ``cycle`` on the same file at once; wall time from start to the last
  one done (the write lock is what they share).

"jobs per CPU-second" divides by the CPU time of the process (every thread: the store's thread does the
SQLite work), which other load on a shared machine disturbs far less than the wall clock; fsync waits are
not CPU time, so compare wall rates for durability settings. Each case runs ``--repeats`` times and the
median is printed with the spread. Targets on the 2-core machine: insert >= 50,000 jobs/s in chunks of
1000; processing >= 5,000 jobs/s with 2 worker processes (see ``python -m bench`` for the real workload).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jobengine.backends.sqlite import SqliteStore
from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion, NewJob

CASES = ("insert", "cycle", "empty", "contend")


@dataclass(frozen=True, slots=True)
class Options:
    jobs: int
    chunk: int
    claim: int
    procs: int
    empty_fetches: int
    synchronous: str
    worker_synchronous: str


@dataclass(frozen=True, slots=True)
class Sample:
    count: int
    wall: float
    cpu: float


def _store(path: str, o: Options) -> SqliteStore:
    if "worker_synchronous" not in inspect.signature(SqliteStore).parameters:  # an older store, to compare
        return SqliteStore(path, synchronous=o.synchronous)
    return SqliteStore(path, synchronous=o.synchronous, worker_synchronous=o.worker_synchronous)


def _jobs(n: int, start: int = 0) -> list[NewJob]:
    return [NewJob(task="bench.task", payload={"i": start + i, "t": 1_700_000_000.123456}) for i in range(n)]


async def _fill(store: SqliteStore, n: int, chunk: int, now: float) -> Sample:
    batches = [_jobs(min(chunk, n - i), i) for i in range(0, n, chunk)]
    phases: list[tuple[str, ...]] = [()] * chunk
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in batches:
        await store.insert_jobs(batch, now, phases)
    return Sample(n, time.perf_counter() - t0, time.process_time() - c0)


async def _cycle(store: SqliteStore, claim: int, now: float, worker: str) -> Sample:
    done = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while True:
        claimed = await store.fetch_jobs(["default"], claim, WorkerId(worker), 60.0, now + 1)
        if not claimed.jobs:
            break
        completions = [Completion(j.id, j.lease_token, None) for j in claimed.jobs if j.lease_token]
        done += len((await store.complete_jobs(completions, now + 2)).jobs)
    return Sample(done, time.perf_counter() - t0, time.process_time() - c0)


async def case_insert(path: str, o: Options) -> Sample:
    store = _store(path, o)
    try:
        await store.migrate()
        return await _fill(store, o.jobs, o.chunk, time.time())
    finally:
        await store.close()


async def case_cycle(path: str, o: Options) -> Sample:
    store = _store(path, o)
    try:
        await store.migrate()
        now = time.time()
        await _fill(store, o.jobs, o.chunk, now)
        return await _cycle(store, o.claim, now, "w1")
    finally:
        await store.close()


async def case_empty(path: str, o: Options) -> Sample:
    store = _store(path, o)
    try:
        await store.migrate()
        now = time.time()
        await store.insert_jobs([NewJob(task="bench.task", run_at=now + 3600)], now, [()])  # not yet due
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(o.empty_fetches):
            await store.fetch_jobs(["default"], o.claim, WorkerId("w1"), 60.0, now)
        return Sample(o.empty_fetches, time.perf_counter() - t0, time.process_time() - c0)
    finally:
        await store.close()


def _contender(path: str, o: Options, name: str, start: float, out: multiprocessing.SimpleQueue[Sample]) -> None:
    async def main() -> Sample:
        store = _store(path, o)
        try:
            await asyncio.sleep(max(0.0, start - time.time()))
            return await _cycle(store, o.claim, time.time() - 5, name)
        finally:
            await store.close()

    out.put(asyncio.run(main()))


async def case_contend(path: str, o: Options) -> Sample:
    store = _store(path, o)
    try:
        await store.migrate()
        await _fill(store, o.jobs, o.chunk, time.time() - 10)
    finally:
        await store.close()
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.SimpleQueue[Sample] = ctx.SimpleQueue()
    start = time.time() + 1.0  # every process imported and opened before the clock starts
    procs = [ctx.Process(target=_contender, args=(path, o, f"w{i}", start, results)) for i in range(o.procs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    samples = [results.get() for _ in procs]
    wall = time.time() - start
    # Wall: until the last process found the queue empty. CPU: summed over the processes.
    return Sample(sum(s.count for s in samples), wall, sum(s.cpu for s in samples))


RUNNERS: dict[str, Callable[[str, Options], object]] = {
    "insert": case_insert,
    "cycle": case_cycle,
    "empty": case_empty,
    "contend": case_contend,
}


def _run_case(name: str, o: Options, directory: str | None) -> Sample:
    with tempfile.TemporaryDirectory(prefix="jobengine-micro-", dir=directory) as tmp:
        runner = RUNNERS[name]
        return asyncio.run(runner(os.path.join(tmp, "micro.db"), o))  # type: ignore[arg-type]


def _fmt(values: Sequence[float]) -> str:
    return f"{statistics.median(values):>10,.0f}  ({min(values):,.0f} - {max(values):,.0f})"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.store_micro", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--chunk", type=int, default=1000, help="jobs per insert_jobs call")
    p.add_argument("--claim", type=int, default=500, help="jobs per fetch_jobs call (a worker's free slots)")
    p.add_argument("--procs", type=int, default=2, help="processes of the contend case")
    p.add_argument("--empty-fetches", type=int, default=2000)
    p.add_argument("--synchronous", default="FULL")
    p.add_argument("--worker-synchronous", default="NORMAL")
    p.add_argument("--tmpdir", default=None)
    args = p.parse_args(argv)
    o = Options(
        args.jobs, args.chunk, args.claim, args.procs, args.empty_fetches, args.synchronous, args.worker_synchronous
    )
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in cases:
        if c not in RUNNERS:
            raise SystemExit(f"unknown case {c!r} (known: {', '.join(CASES)})")
    print(
        f"synchronous={o.synchronous} worker_synchronous={o.worker_synchronous} jobs={o.jobs} chunk={o.chunk} "
        f"claim={o.claim}; median (min - max) of {args.repeats}; load {os.getloadavg()[0]:.1f}"
    )
    samples: dict[str, list[Sample]] = {c: [] for c in cases}
    for _ in range(args.repeats):  # interleaved, so a drift of the machine hits every case alike
        for c in cases:
            samples[c].append(_run_case(c, o, args.tmpdir))
    unit = {"empty": "fetches", "contend": "jobs"}
    for c in cases:
        s = samples[c]
        what = unit.get(c, "jobs")
        print(f"{c:<8} {what:>7}/s wall {_fmt([x.count / x.wall for x in s])}")
        print(f"{'':<8} {what:>7}/CPU-s {_fmt([x.count / x.cpu for x in s])}")
        print(f"{'':<8} {'us CPU':>7} per {what[:-1]}: {statistics.median([x.cpu / x.count * 1e6 for x in s]):,.1f}")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
