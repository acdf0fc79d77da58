"""The PostgreSQL claim as processed jobs pile up between two VACUUMs: ``python -m bench.claim_backlog``.

A claim reads ``jobs_runnable`` from its head. Every job it takes leaves a dead entry there, and the entries
at the head are not removed until VACUUM runs: no insert ever lands among them, and an insert is what
prunes a btree page between vacuums. So a claim walks past every job claimed since the last VACUUM.

A fresh database (next to the one ``--dsn`` names, dropped after) gets ``--jobs`` queued benchmark jobs
plus a reserve, then ``VACUUM ANALYZE``. One client then claims ``--claim`` jobs at a time through the store
and completes them, as a worker does. Every ``--window`` jobs it prints the mean time of a claim and the
jobs per second of that window. ``--vacuum-at N`` runs ``VACUUM`` once after N jobs and prints its time.
The database's own autovacuum settings apply (a server with autovacuum on may vacuum during the run).

    .venv/bin/python -m bench.claim_backlog --dsn postgresql://postgres@127.0.0.1/postgres --jobs 200000 \\
        --vacuum-at 100000
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.postgres import connect, fresh_database
from bench.workload import TASK, make_engine, payload
from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion


def _sql(database: str, statement: str) -> tuple[object, ...] | None:
    """Run ``statement`` on a connection of its own; its first row, if it returns rows."""
    with connect(database) as conn:
        cur = conn.execute(statement)
        return cur.fetchone() if cur.description else None


async def run(args: argparse.Namespace) -> None:
    database, drop = fresh_database(args.dsn)
    try:
        engine, _ = make_engine(database)
        async with engine:
            store = engine.store
            reserve = args.window + args.claim  # the last window's claims still find full batches
            for start in range(0, args.jobs + reserve, 1000):
                await engine.enqueue_many([engine.new_job(TASK, payload(i)) for i in range(start, start + 1000)])
            _sql(database, "VACUUM ANALYZE jobengine.jobs")
            worker, total, since, vacuumed = WorkerId("claim-backlog"), 0, 0, False
            print(f"{'claimed since VACUUM':>21} {'claim ms':>9} {'jobs/s':>8}  (claims of {args.claim})")
            while total < args.jobs:
                claiming, window, began = 0.0, 0, time.perf_counter()
                while window < args.window:
                    t = time.perf_counter()
                    got = await store.fetch_jobs(["default"], args.claim, worker, 30.0, time.time())
                    claiming += time.perf_counter() - t
                    if not got.jobs:
                        raise SystemExit(f"no job to claim after {total + window:,}: the queue ran dry")
                    done = [Completion(j.id, j.lease_token) for j in got.jobs if j.lease_token is not None]
                    await store.complete_jobs(done, time.time())
                    window += len(got.jobs)
                total, since = total + window, since + window
                rate = window / (time.perf_counter() - began)
                print(f"{since:>21,} {1000 * claiming * args.claim / window:>9.2f} {rate:>8,.0f}")
                if args.vacuum_at and total >= args.vacuum_at and not vacuumed:
                    vacuumed, since, t = True, 0, time.perf_counter()
                    _sql(database, "VACUUM jobengine.jobs")
                    pages = _sql(database, "SELECT pg_relation_size('jobengine.jobs_runnable') / 8192")
                    assert pages is not None
                    took = time.perf_counter() - t
                    print(f"VACUUM after {total:,} jobs: {took:.2f} s; jobs_runnable {pages[0]} pages")
    finally:
        drop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.claim_backlog", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", required=True, help="postgresql://user@127.0.0.1/db")
    p.add_argument("--jobs", type=int, default=200_000, help="jobs claimed and completed in all")
    p.add_argument("--claim", type=int, default=50, help="jobs per claim (a worker at the defaults: 50)")
    p.add_argument("--window", type=int, default=20_000, help="jobs per printed line")
    p.add_argument("--vacuum-at", type=int, default=0, help="VACUUM once after this many jobs (0: never)")
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
