"""The benchmark command: ``python -m bench`` or ``python bench/run.py``.

Runs the standard workload (``bench/README.md``) ``--runs`` times, every worker setting given in each run
(interleaved: A B A B …), measures the machine's commit ceiling in the same runs, and prints one table
of medians and spreads. ``--help`` lists the options; ``bench/README.md`` explains the phases.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import postgres
from bench.ceilings import sqlite_commit_rate
from bench.config import BACKENDS, PHASES, BenchConfig, WorkerSetting
from bench.phases import Context, Measure, run_round
from bench.profiling import Profiler, summarize
from bench.report import aggregate, fmt, render
from bench.transports import TRANSPORTS

# Worker defaults for no-op jobs, chosen with this benchmark (see README.md, "Worker defaults").
DEFAULT_CONCURRENCY = "500"
DEFAULT_FETCH_BATCH = "0"
DEFAULT_POLL_INTERVAL = "1.0"


def _list(kind: type, text: str) -> list:  # type: ignore[type-arg]
    return [kind(x) for x in text.split(",") if x.strip()]


def _prefetch(text: str) -> list[int | None]:
    """``--prefetch``: a comma list of counts; empty: the product's default (the worker is not told)."""
    return [int(x) for x in text.split(",") if x.strip()] or [None]


def parse(argv: list[str] | None = None) -> tuple[BenchConfig, str | None]:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="The standard jobengine benchmark (bench/README.md). Comma lists compare settings.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--backend", choices=BACKENDS, default="sqlite")
    p.add_argument("--dsn", help="postgresql://user@127.0.0.1/db (--backend postgres)")
    p.add_argument("--transport", choices=TRANSPORTS, default="database", help="who delivers jobs to workers")
    p.add_argument("--broker-url", help="redis://... or nats://... (--transport; default: the local port)")
    p.add_argument("-n", type=int, default=20_000, help="jobs in the enqueue and process phases")
    p.add_argument("--runs", type=int, default=3, help="runs of every setting, interleaved")
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma list of {', '.join(PHASES)}")
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--concurrency", default=DEFAULT_CONCURRENCY, help="jobs in flight per process (comma list)")
    p.add_argument("--fetch-batch", default=DEFAULT_FETCH_BATCH, help="max jobs per claim, 0: free slots (list)")
    p.add_argument("--prefetch", default="", help="jobs claimed beyond free slots ('': the default) (list)")
    p.add_argument("--poll-interval", default=DEFAULT_POLL_INTERVAL, help="idle re-check, seconds (list)")
    p.add_argument("--loop", default="asyncio", help="the workers' event loop: asyncio, uvloop (list)")
    p.add_argument("--worker-log-level", default="warning", help="the workers' log level (info: the job lines) (list)")
    p.add_argument("--lease-seconds", type=float, default=30.0, help="worker lease (heartbeat: a third)")
    p.add_argument("--rate", type=float, default=200.0, help="latency phase: jobs/s offered")
    p.add_argument("--duration", type=float, default=20.0, help="latency phase: seconds")
    p.add_argument("--chunk", type=int, default=1000, help="enqueue batch: jobs per enqueue_many call")
    p.add_argument("--warmup", type=int, default=20, help="latency phase: warm-up jobs")
    p.add_argument("--synchronous", default="FULL", help="SQLite synchronous (the Settings default)")
    p.add_argument("--ceiling-commits", type=int, default=2000, help="commits timed for the SQLite ceiling")
    p.add_argument("--no-ceilings", action="store_true", help="skip the machine ceilings")
    p.add_argument("--tmpdir", help="where SQLite files and sockets go (None: system temp dir)")
    p.add_argument("--timeout", type=float, default=300.0, help="give up waiting on a phase after this")
    p.add_argument("--profile", metavar="DIR", help="sample producer and workers with py-spy into DIR")
    p.add_argument("--profile-idle", action="store_true", help="profile waiting threads too (wall clock)")
    p.add_argument("--json", metavar="PATH", help="also write every measure as JSON")
    a = p.parse_args(argv)
    phases = tuple(x.strip() for x in a.phases.split(",") if x.strip())
    if unknown := [x for x in phases if x not in PHASES]:
        p.error(f"--phases: unknown {', '.join(unknown)} (known: {', '.join(PHASES)})")
    settings = tuple(
        WorkerSetting(a.workers, c, b, poll, a.lease_seconds, ahead, loop, level)
        for c, b, ahead, poll, loop, level in itertools.product(
            _list(int, a.concurrency),
            _list(int, a.fetch_batch),
            _prefetch(a.prefetch),
            _list(float, a.poll_interval),
            _list(str, a.loop),
            _list(str, a.worker_log_level),
        )
    )
    if a.backend == "postgres" and not a.dsn:
        p.error("--backend postgres needs --dsn")
    cfg = BenchConfig(
        backend=a.backend, dsn=a.dsn, n=a.n, runs=a.runs, chunk=a.chunk, phases=phases, settings=settings,
        rate=a.rate, duration=a.duration, warmup_jobs=a.warmup, idle_after_warmup=1.0,
        synchronous=a.synchronous.upper(), ceiling_commits=a.ceiling_commits, ceilings=not a.no_ceilings,
        tmpdir=a.tmpdir, timeout=a.timeout, profile_dir=a.profile, profile_idle=a.profile_idle,
        transport=a.transport, broker_url=a.broker_url,
    )  # fmt: skip
    return cfg, a.json


def ceilings(cfg: BenchConfig) -> list[Measure]:
    """The machine's commit ceiling for the backend under test (nothing for memory, a throwaway file)."""
    if not cfg.ceilings:
        return []
    if cfg.backend == "sqlite":
        rate = sqlite_commit_rate(cfg.synchronous, cfg.ceiling_commits, cfg.tmpdir)
        who = f"sqlite3, WAL, synchronous={cfg.synchronous}"
        return [Measure("ceiling", "commits/s (1 INSERT per txn)", rate, "commits/s", who)]
    if cfg.backend == "postgres" and cfg.dsn:
        tps = postgres.pgbench_ceiling(cfg.dsn)
        if tps is not None:
            return [Measure("ceiling", "tps", tps, "tps", "pgbench -b simple-update -c 2 -j 2")]
    return []


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    )


def load() -> str:
    """The 1-minute load average: other work on the machine skews every figure."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def _progress(run: int, runs: int, m: Measure) -> None:
    value = fmt(m.value, m.unit)
    who = "" if m.workers.startswith("producer") else f" [{m.workers}]"
    print(f"run {run}/{runs}{who} {m.phase}: {m.metric} = {value} {m.unit}", file=sys.stderr, flush=True)


async def bench(cfg: BenchConfig) -> list[Measure]:
    measures: list[Measure] = []
    profiler = Profiler(cfg.profile_dir, idle=cfg.profile_idle) if cfg.profile_dir else None
    with tempfile.TemporaryDirectory(prefix="jobengine-bench-logs-", dir=cfg.tmpdir) as logdir:
        for run in range(1, cfg.runs + 1):
            ctx = Context(cfg, logdir, profiler, run)

            def report(m: Measure, run: int = run) -> None:
                _progress(run, cfg.runs, m)
                measures.append(m)

            for m in await asyncio.to_thread(ceilings, cfg):
                report(m)
            for setting in cfg.settings:  # interleaved: every setting once per run
                await run_round(ctx, setting, report)
    return measures


def main(argv: list[str] | None = None) -> int:
    cfg, json_path = parse(argv)
    # SIGTERM (a timeout, a CI cancel) unwinds like Ctrl-C, so workers stop and temp stores are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"machine: {machine()}", file=sys.stderr)
    started, load_before = time.time(), load()
    measures = asyncio.run(bench(cfg))
    durability = f", synchronous={cfg.synchronous}" if cfg.backend == "sqlite" else ""
    via = f", transport {cfg.transport}" if cfg.transport != "database" else ""
    title = (
        f"jobengine benchmark - {cfg.backend}{durability}{via}, N={cfg.n:,}, {cfg.runs} runs "
        f"({time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, {time.time() - started:,.0f} s)"
    )
    notes = [
        f"machine: {machine()}; load average {load_before} before, {load()} after",
        "process: N / (launch of the worker processes -> all N ran and none queued or running); steady: "
        "N / (first -> last job start)",
        f"latency: job start - enqueue call, open loop at {cfg.rate:g} jobs/s for {cfg.duration:g} s after "
        f"{cfg.warmup_jobs} warm-up jobs and 1 s idle",
    ]
    if cfg.profile_dir:
        notes.append("PROFILED RUN: py-spy sampling slows every figure; use it for the profile, not the numbers")
    render(title, cfg.backend, aggregate(measures), notes)
    if cfg.profile_dir:
        directory = Path(cfg.profile_dir)
        for group in ("enqueue-batch-producer", "enqueue-single-producer", "process-worker", "latency-worker"):
            paths = sorted(directory.glob(f"*{group}*.txt"))
            if paths:
                print(f"\nprofile: {group} ({len(paths)} files in {directory})")
                print(summarize(paths))
    if json_path:
        Path(json_path).write_text(
            json.dumps({"config": asdict(cfg), "measures": [asdict(m) for m in measures]}, indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
