"""5,000 jobs through PgBouncer in transaction mode, run by worker processes: none lost, none run twice.

The workers (``jobengine worker``, tests/support/netbed_app.py) reach the database through the pooler
(``database``) with ``database_direct`` naming the server, as docs/configuration.md says to run behind
PgBouncer; the pooler lends few server sessions (``default_pool_size`` 8) to the workers' many client
connections, so transactions of one worker run on sessions another used a moment before. Jobs go in from
the test's engine, through the pooler too, in batches (piped) and one by one. The outside ledger: each
execution writes ``start`` / ``end`` lines to a file of its process.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from jobengine.engine import Engine
from jobengine.errors import StoreUnavailable
from jobengine.settings import Settings
from support.deploy import ROOT
from support.pgbouncer import pgbouncer
from support.pgcluster import Cluster, postgres_cluster
from support.processes import Processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

N = 5_000
WORKERS = ("worker1", "worker2", "worker3")


async def _until(check: Callable[[], Awaitable[bool]], what: str, ceiling: float) -> None:
    deadline = time.monotonic() + ceiling
    while not await check():
        assert time.monotonic() < deadline, f"timed out after {ceiling:g}s waiting for {what}"
        await asyncio.sleep(0.5)


async def test_5000_jobs_through_the_pooler_none_lost_none_twice(postgres_dsn: str, tmp_path: Path) -> None:
    await _through_the_pooler(postgres_dsn, tmp_path)


async def test_the_server_restarted_behind_the_pooler_loses_nothing(tmp_path: Path) -> None:
    """The same, on a cluster of the test's own restarted (``pg_ctl restart -m fast``) with a fifth done:
    PgBouncer's server sessions and the workers' direct sessions all end; every process carries on. The
    pooler tries a failed server login again after 1 s (``server_login_retry``, 15 s by default, during
    which it refuses its clients), as docs/postgres.md advises."""
    with postgres_cluster() as cluster:
        await _through_the_pooler(cluster.dsn, tmp_path, restart=cluster)


async def _through_the_pooler(postgres_dsn: str, tmp_path: Path, restart: Cluster | None = None) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    with pgbouncer(postgres_dsn, tmp_path, settings={"server_login_retry": "1"} if restart else {}) as bouncer:
        settings = Settings(database=bouncer.dsn, database_direct=postgres_dsn)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "JOBENGINE_DATABASE": bouncer.dsn,
            "JOBENGINE_DATABASE_DIRECT": postgres_dsn,
            "JOBENGINE_POLL_INTERVAL": "0.5",
            "NETBED_LEDGER": str(ledger),
        }
        procs = Processes(tmp_path, env, ROOT)
        try:
            async with Engine.from_settings(settings) as engine:  # migrates, on a direct session
                for name in WORKERS:
                    argv = [sys.executable, "-m", "jobengine", "worker", "--app", "tests.support.netbed_app:app"]
                    procs.run(name, argv, {"NETBED_HOST": name})
                for p in list(procs.procs):  # every worker claims from the first batch: each runs some
                    await asyncio.to_thread(procs.wait_output, p, "started on queues", 120)
                ids = []
                for start in range(0, N - 100, 1000):
                    batch = [engine.new_job("mark", {"i": i, "sleep": 0.01}) for i in range(start, start + 1000)]
                    ids += [j.id for j in await engine.enqueue_many(batch[: N - 100 - start])]
                ids += [(await engine.enqueue("mark", {"i": i, "sleep": 0.01})).id for i in range(len(ids), N)]
                assert len(set(ids)) == N

                async def all_succeeded() -> bool:
                    try:
                        return sum(1 for j in await engine.get_jobs(ids) if j.state == "succeeded") == N
                    except StoreUnavailable:  # the server restarting: asked again, as any caller would
                        return False

                if restart is not None:

                    async def some_done() -> bool:
                        return sum(len(p.read_text().splitlines()) for p in ledger.glob("*.txt")) >= N // 5 * 2

                    await _until(some_done, "a fifth of the jobs to run", 120)
                    await asyncio.to_thread(restart.restart, "fast")
                    restarted = time.monotonic()
                await _until(all_succeeded, f"the {N} jobs to succeed", 240)
                if restart is not None:
                    ends = sorted(float(t.split()[4]) for p in ledger.glob("*.txt") for t in p.read_text().splitlines())
                    gap = max(b - a for a, b in itertools.pairwise(ends))
                    print(f"all done {time.monotonic() - restarted:.1f} s after the restart; longest gap {gap:.1f} s")
            for p, name in procs.procs.items():
                assert p.poll() is None, f"{name} exited: {procs.output(p)[-3000:]}"
                p.send_signal(signal.SIGTERM)
            for p, name in procs.procs.items():
                assert p.wait(60) == 0, f"{name}: {procs.output(p)[-3000:]}"
        finally:
            procs.stop_all()
        stats = bouncer.stats(urlsplit(postgres_dsn).path.lstrip("/"))

    ends = Counter(
        text.split()[1]
        for path in ledger.glob("*.txt")
        for text in path.read_text().splitlines()
        if text.startswith("end ")
    )
    lost = [i for i in ids if ends[i] == 0]
    twice = [i for i in ids if ends[i] > 1]
    print(f"pgbouncer: {N} jobs, {len(lost)} lost, {len(twice)} twice, {stats['total_xact_count']} pooled transactions")
    assert (lost, twice) == ([], [])
    assert {p.stem for p in ledger.glob("*.txt")} == set(WORKERS), "a worker ran no job"
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(DISTINCT job_id), count(*) FROM jobengine.events WHERE type = 'job.succeeded'"
        )
        assert await cur.fetchone() == (N, N)  # each job succeeded exactly once in the store
    # The claims and completions went through the pooler: at least one transaction per claim's worth of jobs
    # (a worker's claim takes at most its free slots and its prefetch buffer).
    defaults = Settings()
    assert int(stats["total_xact_count"]) >= N // (defaults.worker_concurrency + defaults.worker_prefetch)
