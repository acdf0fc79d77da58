"""``python -m bench.dashboard``: how long the dashboard's pages take with many jobs in the store.

Fills a fresh SQLite file with ``--jobs`` jobs of one tenant (default 100,000: queued, with a share made
dead, succeeded and running so every state and page has rows), plus a second tenant's jobs, then requests
each page ``--repeat`` times through the real app (the FastAPI app with its middleware and the dashboard's
session cookie, over httpx's in-process ASGI transport: server time, no network) and prints the median,
p95 and max per page. The target is every page under 200 ms at 100,000 jobs. Never run as a test.

    .venv/bin/python -m bench.dashboard                  # 100,000 jobs, 20 requests per page
    .venv/bin/python -m bench.dashboard --jobs 20000 --repeat 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure
from jobengine.dashboard.session import COOKIE
from jobengine.engine import Engine
from jobengine.http.app import create_app
from jobengine.settings import Settings

BATCH = 1000


async def fill(engine: Engine, jobs: int) -> str:
    """``jobs`` jobs of tenant ``acme`` in 4 queues (and a tenth as many of ``globex``); returns one job id.
    Of the first batches: 2% are claimed, of those half succeed and a quarter die, the rest keep running."""
    some_id = ""
    for start in range(0, jobs, BATCH):
        n = min(BATCH, jobs - start)
        batch = [
            engine.new_job("report", {"customer": f"c{start + i}", "rows": i}, tenant="acme", queue=f"q{i % 4}")
            for i in range(n)
        ]
        stored = await engine.enqueue_many(batch)
        some_id = stored[0].id
        if start % (BATCH * 50) == 0:
            other = [engine.new_job("report", {"i": i}, tenant="globex") for i in range(n // 10)]
            await engine.enqueue_many(other)
    claimed = await engine.transitions.fetch_jobs(["q0", "q1", "q2", "q3"], max(1, jobs // 50), WorkerId("bench"), 3600)
    now = time.time()
    half = claimed[: len(claimed) // 2]
    quarter = claimed[len(claimed) // 2 : len(claimed) * 3 // 4]
    assert all(j.lease_token for j in claimed)
    await engine.transitions.complete_jobs(
        [Completion(j.id, j.lease_token, {"ok": True}) for j in half if j.lease_token]
    )
    await engine.transitions.fail_jobs(
        [
            Failure(j.id, j.lease_token, AttemptError(1, now, "ValueError", f"bad row {j.id}"), FailOutcome.DEAD)
            for j in quarter
            if j.lease_token
        ]
    )
    return some_id


async def measure(jobs: int, repeat: int) -> int:
    folder = Path(tempfile.mkdtemp(prefix="jobengine-dash-bench-"))
    settings = Settings(database=str(folder / "dash.db"))
    engine = Engine.from_settings(settings)
    async with engine:
        t0 = time.perf_counter()
        job_id = await fill(engine, jobs)
        print(f"filled {jobs:,} jobs in {time.perf_counter() - t0:.1f} s ({folder})", file=sys.stderr)
        _, key = await engine.keys.create("acme", ["admin"])
        app = create_app(engine, settings)
        pages = [
            "/", "/jobs", "/jobs?state=queued", "/jobs?state=dead", "/jobs?queue=q2&task=report",
            "/jobs?q=c99", f"/jobs/{job_id}", "/queues", "/dead", "/failures", "/schedules", "/runs",
        ]  # fmt: skip
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", cookies={COOKIE: key}) as c:
            # CPU: this process's CPU time per request (every thread: the loop and SQLite's), which a busy
            # machine inflates far less than wall time.
            print(f"{'page':32} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'cpu ms':>8}")
            worst = 0.0
            for path in pages:
                r = await c.get(path)  # warm-up (template compilation, caches)
                assert r.status_code == 200, (path, r.status_code, r.text[-300:])
                times = []
                cpu = time.process_time()
                for _ in range(repeat):
                    t = time.perf_counter()
                    r = await c.get(path)
                    times.append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200
                cpu_ms = (time.process_time() - cpu) * 1000 / repeat
                times.sort()
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                worst = max(worst, p95)
                print(f"{path[:32]:32} {statistics.median(times):10.1f} {p95:8.1f} {times[-1]:8.1f} {cpu_ms:8.1f}")
            load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "?"
            print(f"worst p95: {worst:.1f} ms ({'under' if worst < 200 else 'OVER'} 200 ms); load average {load}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    return asyncio.run(measure(args.jobs, args.repeat))


if __name__ == "__main__":
    raise SystemExit(main())
