"""``python -m bench.compare.chain``: a 1,000-link chain of no-op tasks in jobengine beside Celery's ``chain``
on Redis, end to end, one table.

- jobengine, at the product's defaults with one worker in this process (the code of ``bench/graphs.py``):
  a graph chain (``chain(noop.s(0), noop.s(1), ...)``) and the same chain of plain jobs, each with
  ``depends_on`` the one before, stored with one ``enqueue_many``; from the submit call until the last
  node's ``finished_at``. On a fresh SQLite file (``synchronous=FULL``, the product's default), once with
  the database transport and once with jobs delivered by Redis Streams (state still in SQLite; streams of
  their own under a fresh key prefix, see bench/transports.py).
- Celery, in the comparison venv (``/tmp/jobengine-compare-redis-venv``, created on first use, never this
  project's): ``chain(noop.si(i) for i in range(n)).apply_async()`` on a Redis broker with the Redis result
  backend, one worker process per setting (``--celery solo,threads:8``), from the ``apply_async`` call until
  the last task's ``date_done`` (see :mod:`bench.compare.chain_celery`).

Every run measures every system and setting once, interleaved; the table gives the median and min-max over
``--runs`` of the end-to-end seconds and the milliseconds per link (end to end / (n - 1)). Redis: one
database number claimed for the whole comparison, as ``redis_compare`` claims it, flushed before each Celery
run. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from bench.compare.redis_compare import ROOT, VENVS, claim_db, ensure_venv, release_db
from bench.graphs import _chain_graph, _chain_jobs
from bench.stores import fresh_store
from bench.transports import fresh_queue

Measure = Callable[[str, int, float, "str | None"], Coroutine[Any, Any, float]]
KINDS: dict[str, Measure] = {"graph chain": _chain_graph, "depends_on": _chain_jobs}


def jobengine(measure: Measure, transport: str, url: str, n: int, timeout: float) -> float:
    """End-to-end seconds of one chain on a fresh SQLite store (and fresh streams for a broker)."""
    store = fresh_store("sqlite", None, None)
    queue = fresh_queue(transport, url if transport == "redis" else None)
    try:
        # The measures return seconds per link; the table wants the whole chain too.
        return asyncio.run(measure(store.database, n, timeout, queue.settings)) * (n - 1)
    finally:
        queue.cleanup()
        store.cleanup()


def celery(url: str, setting: str, n: int, timeout: float) -> float:
    python = VENVS["redis"][0] / "bin" / "python"
    cmd = [str(python), "-m", "bench.compare.chain_celery", "run", "--url", url, "--setting", setting,
           "-n", str(n), "--timeout", str(timeout)]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def celery_versions() -> str:
    code = (
        "import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in ('celery', 'kombu', 'redis')))"
    )
    python = VENVS["redis"][0] / "bin" / "python"
    return (
        "comparison venv: " + subprocess.run([str(python), "-c", code], capture_output=True, text=True).stdout.strip()
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare.chain", description=__doc__.splitlines()[0])
    p.add_argument("--redis", default="redis://127.0.0.1:6379", help="the Redis server (a db number is claimed)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("-n", "--chain", type=int, default=1_000, help="nodes of every chain")
    p.add_argument("--transports", default="database,redis", help="jobengine's transports ('' leaves it out)")
    p.add_argument("--celery", default="solo,threads:8", help="Celery worker settings ('' leaves it out)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one chain may take")
    args = p.parse_args(argv)

    transports = [t for t in args.transports.split(",") if t]
    celery_settings = [s for s in args.celery.split(",") if s]
    if celery_settings:
        ensure_venv("redis")
    plan: list[tuple[str, str, Callable[[str], float]]] = []
    for transport in transports:
        for kind, measure in KINDS.items():
            one = partial(jobengine, measure, transport, n=args.chain, timeout=args.timeout)
            plan.append((f"jobengine {kind}", f"sqlite, {transport} transport, 1 worker x 10 (defaults)", one))
    for setting in celery_settings:
        one = partial(celery, setting=setting, n=args.chain, timeout=args.timeout)
        plan.append(("celery chain", f"redis broker + result backend, 1 worker -P {setting.replace(':', ' -c ')}", one))

    db, token, admin = claim_db(args.redis)
    url = f"{args.redis}/{db}"
    seconds: dict[tuple[str, str], list[float]] = {(system, setting): [] for system, setting, _ in plan}
    load_before = os.getloadavg()
    started = time.time()
    try:
        for run in range(1, args.runs + 1):
            # Interleaved, run by run: a drift of the machine hits every system alike.
            for system, setting, timed in plan:
                print(f"run {run}/{args.runs}: {system}, {setting} ...", file=sys.stderr, flush=True)
                took = timed(url)
                seconds[(system, setting)].append(took)
                print(f"  {took:.2f} s", file=sys.stderr, flush=True)
    finally:
        release_db(db, token, admin)
    load_after = os.getloadavg()

    links = args.chain - 1
    print(f"\nchain of {args.chain:,} no-op tasks ({links:,} links), {args.runs} run(s), interleaved; "
          f"{time.strftime('%Y-%m-%d %H:%M')} ({time.time() - started:,.0f} s), {os.cpu_count()} cores, "
          f"load {load_before[0]:.2f} before, {load_after[0]:.2f} after")  # fmt: skip
    if celery_settings:
        print(celery_versions())
    print("| system | setting | end to end, s: median | min - max | ms per link: median | min - max |")
    print("|---|---|---:|---:|---:|---:|")
    for (system, setting), values in seconds.items():
        ms = [v * 1000 / links for v in values]
        print(f"| {system} | {setting} | {statistics.median(values):.2f} | {min(values):.2f} - {max(values):.2f} "
              f"| {statistics.median(ms):.2f} | {min(ms):.2f} - {max(ms):.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
