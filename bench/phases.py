"""The four phases of one run (``bench/README.md``), each on a fresh store, each returning its measures.

Times are taken with ``time.perf_counter``; the job records carry ``time.time()`` stamps because they
cross processes (the producer's ``t`` and the worker's start).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from bench.collector import Collector
from bench.config import BenchConfig, WorkerSetting
from bench.cpu import cpu_seconds, postgres_backends
from bench.profiling import Profiler
from bench.stores import FreshStore, fresh_store
from bench.transports import FreshQueue, fresh_queue, published
from bench.workers import InProcessWorkers, SubprocessWorkers, Workers
from bench.workload import TASK, Sink, make_engine, payload
from jobengine.core.states import JobState
from jobengine.engine import Engine

#: Who did the work of a measure: enqueue phases have no workers, only the producer.
PRODUCER = "producer (1 process)"


@dataclass(frozen=True, slots=True)
class Measure:
    phase: str
    metric: str
    value: float  # NaN when the phase did not finish
    unit: str
    workers: str = PRODUCER
    #: (what, value) pairs; the table shows one value if every run agrees, else each run's.
    checks: tuple[tuple[str, str], ...] = ()


@dataclass
class Context:
    cfg: BenchConfig
    logdir: str
    profiler: Profiler | None = None
    run: int = 0
    log: list[str] = field(default_factory=list)
    #: Where each phase's store comes from; None: an empty one (``bench.growth`` passes a grown one).
    fresh: Callable[[], FreshStore] | None = None


@dataclass
class Opened:
    """A store and the producer's engine on it (kept open from an enqueue phase to the process phase)."""

    store: FreshStore
    engine: Engine
    sink: Sink
    queue: FreshQueue = field(default_factory=lambda: FreshQueue(None, lambda: None))

    async def close(self) -> None:
        await self.engine.close()
        self.store.cleanup()
        await asyncio.to_thread(self.queue.cleanup)


async def open_fresh(ctx: Context) -> Opened:
    cfg = ctx.cfg
    store = ctx.fresh() if ctx.fresh is not None else fresh_store(cfg.backend, cfg.dsn, cfg.tmpdir)
    queue = fresh_queue(cfg.transport, cfg.broker_url)
    engine, sink = make_engine(store.database, cfg.synchronous, queue.settings)
    await engine.start()  # migrations are not part of any measure
    return Opened(store, engine, sink, queue)


@contextlib.contextmanager
def _profiled(ctx: Context, name: str) -> Iterator[None]:
    if ctx.profiler is None:
        yield
        return
    with ctx.profiler.attach(f"run{ctx.run}-{name}-producer"):
        yield


def _workers(ctx: Context, opened: Opened, collector: Collector, setting: WorkerSetting, tag: str) -> Workers:
    if not opened.store.shared:
        return InProcessWorkers(opened.engine, opened.sink, collector.path, setting)
    return SubprocessWorkers(
        opened.store.database, collector.path, setting, ctx.cfg.synchronous, ctx.logdir,
        ctx.profiler, f"run{ctx.run}-{tag}", opened.queue.settings,
    )  # fmt: skip


async def _fill(engine: Engine, first: int, count: int, chunk: int) -> None:
    for start in range(first, first + count, chunk):
        jobs = [engine.new_job(TASK, payload(i)) for i in range(start, min(first + count, start + chunk))]
        await engine.enqueue_many(jobs)


# -- 1. enqueue batch ---------------------------------------------------------------------------------
async def enqueue_batch(ctx: Context, opened: Opened) -> Measure:
    n, chunk = ctx.cfg.n, ctx.cfg.chunk
    with _profiled(ctx, "enqueue-batch"):
        started = time.perf_counter()
        await _fill(opened.engine, 0, n, chunk)
        elapsed = time.perf_counter() - started
    return Measure("enqueue batch", f"jobs/s (chunks of {chunk:,})", n / elapsed, "jobs/s")


# -- 2. enqueue single --------------------------------------------------------------------------------
async def enqueue_single(ctx: Context, opened: Opened) -> Measure:
    n, engine = ctx.cfg.n, opened.engine
    with _profiled(ctx, "enqueue-single"):
        started = time.perf_counter()
        for i in range(n):
            await engine.enqueue(TASK, payload(i))
        elapsed = time.perf_counter() - started
    return Measure("enqueue single", "jobs/s (one call each)", n / elapsed, "jobs/s")


# -- 3. process ---------------------------------------------------------------------------------------
async def active_jobs(engine: Engine) -> int:
    """Jobs not yet finished: queued, scheduled, running, failed (awaiting a retry), blocked."""
    return sum((await engine.count_jobs(finished=False)).values())


async def _drained(engine: Engine, timeout: float) -> bool:
    """Poll the store every 2 ms until nothing is active (True) or ``timeout`` passed (False)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if await active_jobs(engine) == 0:
            return True
        await asyncio.sleep(0.002)
    return False


async def process(ctx: Context, opened: Opened, setting: WorkerSetting) -> list[Measure]:
    """Launch the workers on the N queued jobs; stop the clock when all N reported and the store is drained."""
    n, timeout = ctx.cfg.n, ctx.cfg.timeout
    checks: list[tuple[str, str]] = []
    await published(opened.engine)  # with a broker: every job's message is in it before the clock starts
    with Collector(ctx.cfg.tmpdir) as collector:
        workers = _workers(ctx, opened, collector, setting, "process")
        postgres = ctx.cfg.backend == "postgres"
        producers = await asyncio.to_thread(postgres_backends, opened.store.database) if postgres else set()
        started = time.perf_counter()
        workers.start()
        worker_cpu = server_cpu = None
        try:
            arrived = await asyncio.to_thread(collector.wait_for, n, timeout)
            ran = time.perf_counter() - started
            drained = arrived and await _drained(opened.engine, timeout)
            elapsed = time.perf_counter() - started
            # Before the stop: a process that exited has no /proc entry to read.
            worker_cpu = workers.cpu_seconds()
            if postgres:
                backends = await asyncio.to_thread(postgres_backends, opened.store.database)
                server_cpu = sum(cpu_seconds(pid) for pid in backends - producers)
        finally:
            await workers.stop()
        snap = collector.snapshot()
    if not arrived:
        checks.append(("TIMEOUT, jobs ran", f"{snap.distinct:,}/{n:,} in {timeout:g}s"))
    elif not drained:
        checks.append(("TIMEOUT, store not drained after", f"{timeout:g}s"))
    counts = await opened.engine.count_jobs()
    succeeded = sum(c for (_, state), c in counts.items() if state is JobState.SUCCEEDED)
    if succeeded != n:
        checks.append(("succeeded in the store", f"{succeeded:,}/{n:,}"))
    checks.append(("duplicates", str(snap.duplicates)))
    ok = arrived and drained
    steady = math.nan
    if snap.first_start is not None and snap.last_start is not None and snap.last_start > snap.first_start:
        steady = snap.distinct / (snap.last_start - snap.first_start)
    label = setting.label
    return [
        Measure("process", "jobs/s (launch -> drained)", n / elapsed if ok else math.nan, "jobs/s", label,
                tuple(checks)),
        Measure("process", "jobs/s steady (first -> last)", steady, "jobs/s", label),
        Measure("process", "jobs/s (launch -> all ran)", n / ran if arrived else math.nan, "jobs/s", label),
        *[
            Measure("process", f"{who} CPU ms per 1,000 jobs", 1e6 * cpu / n if ok else math.nan, "ms", label)
            for who, cpu in (("worker", worker_cpu), ("server", server_cpu))
            if cpu is not None
        ],
    ]  # fmt: skip


# -- 4. latency ---------------------------------------------------------------------------------------
def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (NaN when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


async def latency(ctx: Context, opened: Opened, setting: WorkerSetting) -> list[Measure]:
    """Warm workers up, idle 1 s, then enqueue open loop at ``rate`` jobs/s for ``duration`` s."""
    cfg, engine = ctx.cfg, opened.engine
    warm, total = cfg.warmup_jobs, round(cfg.rate * cfg.duration)
    checks: list[tuple[str, str]] = []
    with Collector(cfg.tmpdir) as collector:
        workers = _workers(ctx, opened, collector, setting, "latency")
        workers.start()
        try:
            for i in range(warm):
                await engine.enqueue(TASK, payload(i))
            if not await asyncio.to_thread(collector.wait_for, warm, cfg.timeout):
                raise SystemExit(f"latency: the {warm} warm-up jobs did not run within {cfg.timeout:g}s")
            await asyncio.sleep(cfg.idle_after_warmup)
            interval = 1.0 / cfg.rate
            behind = 0
            begun = time.perf_counter()
            for k in range(total):
                # Open loop: each call has its slot on a fixed schedule, however long earlier calls took.
                delay = begun + k * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -interval:
                    behind += 1
                await engine.enqueue(TASK, payload(warm + k))
            produced = time.perf_counter() - begun
            arrived = await asyncio.to_thread(collector.wait_for, warm + total, cfg.timeout)
            worker_cpu = workers.cpu_seconds()  # before the stop, as in process()
        finally:
            await workers.stop()
        snap = collector.snapshot(only=range(warm, warm + total))
    if not arrived:
        checks.append(("TIMEOUT, jobs ran", f"{snap.distinct:,}/{total:,}"))
    checks.append(("offered jobs/s", f"{total / produced:,.0f}"))
    checks.append(("enqueue calls > 1 slot late", str(behind)))
    checks.append(("duplicates", str(snap.duplicates)))
    ms = [1000 * x for x in snap.latencies]
    label = setting.label
    out = [Measure("latency", f"p{p} ms", percentile(ms, p), "ms", label) for p in (50, 90, 99)]
    out.append(Measure("latency", "max ms", max(ms) if ms else math.nan, "ms", label, tuple(checks)))
    if worker_cpu is not None:
        out.append(Measure("latency", "worker CPU ms per 1,000 jobs", 1e6 * worker_cpu / (warm + total), "ms", label))
    return out


# -- one run of every selected phase ------------------------------------------------------------------
async def run_round(ctx: Context, setting: WorkerSetting, report: Callable[[Measure], None]) -> None:
    """The selected phases in order. The process phase works the store that enqueue single (or else
    enqueue batch) filled; if neither ran it fills a fresh store with the batch API, unmeasured. Each
    measure goes to ``report`` as soon as its phase ends."""
    phases = ctx.cfg.phases
    queued: Opened | None = None
    try:
        for name, measure in (("enqueue-batch", enqueue_batch), ("enqueue-single", enqueue_single)):
            if name not in phases:
                continue
            opened = await open_fresh(ctx)
            try:
                report(await measure(ctx, opened))
            except BaseException:
                await opened.close()
                raise
            if queued is not None:
                await queued.close()
            queued = opened
        if "process" in phases:
            if queued is None:
                queued = await open_fresh(ctx)
                await _fill(queued.engine, 0, ctx.cfg.n, ctx.cfg.chunk)
            for m in await process(ctx, queued, setting):
                report(m)
        if queued is not None:
            await queued.close()
            queued = None
        if "latency" in phases:
            opened = await open_fresh(ctx)
            try:
                for m in await latency(ctx, opened, setting):
                    report(m)
            finally:
                await opened.close()
    finally:
        if queued is not None:
            await queued.close()
