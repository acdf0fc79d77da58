"""Chaos on PostgreSQL: 10,000 jobs, 4 worker processes, one SIGKILLed every 2 s (and replaced), every
session of the database terminated every 3 s, until KILLS kills and TERMINATIONS terminations (or the end of
the work). Nothing is lost, nothing runs twice at once, all complete, and the workers reconnect by
themselves. The test is bounded by the work, not by a deadline: it fails when no job succeeds for STALL
seconds, however long a busy machine takes to get through them all.

The workers (tests/support/pg_chaos_worker.py) write each execution's start and end to a ledger file that
the engine knows nothing about; an execution of a killed process ends when it was killed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

from jobengine.backends.postgres import PostgresStore
from jobengine.core.models import NewJob
from jobengine.core.states import JobState

ROOT = Path(__file__).resolve().parents[3]
N = 10_000
WORKERS = 4
SLEEP = 0.03  # per job: 4 workers x 8 slots -> ~1,000 jobs/s at most
KILLS, TERMINATIONS = 6, 4  # then the chaos stops and the workers left finish the work
STALL = 120.0  # seconds without a job succeeding: the workers are stuck (a replaced worker starts well within)


def _spawn(env: dict[str, str], logs: Path, n: int) -> subprocess.Popen[bytes]:
    with open(logs / f"worker-{n}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.pg_chaos_worker"], cwd=ROOT, env=env, stdout=log, stderr=log
        )


async def _terminate_sessions(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        cur = await admin.execute(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


def _overlaps(ledger: Path, killed_at: dict[int, float]) -> tuple[list[str], int]:
    """Executions of one job that overlap in time; and the number of executions."""
    runs: dict[str, dict[tuple[int, int], list[float]]] = defaultdict(dict)
    for line in ledger.read_text().splitlines():
        kind, job, pid, attempt, at = line.split()
        span = runs[job].setdefault((int(pid), int(attempt)), [float("nan"), float("nan")])
        span[0 if kind == "start" else 1] = float(at)
    problems, executions = [], 0
    for job, spans in runs.items():
        intervals = []
        for (pid, attempt), (start, end) in spans.items():
            executions += 1
            if end != end:  # no end: its process must have been killed during it
                if pid not in killed_at:
                    problems.append(f"{job}: attempt {attempt} in live process {pid} never ended")
                    continue
                end = killed_at[pid]
            intervals.append((start, end, pid, attempt))
        intervals.sort()
        for (_, e1, p1, a1), (s2, _, p2, a2) in itertools.pairwise(intervals):
            if s2 < e1:
                problems.append(f"{job}: attempt {a2} (pid {p2}) started before attempt {a1} (pid {p1}) ended")
    return problems, executions


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_kills_and_terminated_sessions_lose_nothing_and_run_nothing_twice_at_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    store = PostgresStore(postgres_dsn)
    await store.migrate()
    for start in range(0, N, 1000):
        batch = [
            NewJob(task="chaos", payload={"i": i, "sleep": SLEEP}, max_attempts=1000)
            for i in range(start, start + 1000)
        ]
        await store.insert_jobs(batch, time.time(), [()] * len(batch))

    ledger = tmp_path / "ledger"
    env = {**os.environ, "JOBENGINE_DATABASE": postgres_dsn, "LEDGER": str(ledger), "CHAOS_CONCURRENCY": "8"}
    procs = [_spawn(env, tmp_path, n) for n in range(WORKERS)]
    spawned = WORKERS
    killed_at: dict[int, float] = {}
    terminations = termination_rounds = 0
    rng = random.Random(7)
    loop = asyncio.get_running_loop()
    started = loop.time()
    next_kill, next_terminate = started + 2.0, started + 3.0
    succeeded, progressed = 0, started
    try:
        while True:
            counts = await store.count_jobs()
            done = counts.get(("default", JobState.SUCCEEDED), 0)
            if done == N:
                break
            now = loop.time()
            if done > succeeded:
                succeeded, progressed = done, now
            assert now - progressed < STALL, f"no job succeeded for {STALL:g} s: {counts}"
            if now >= next_kill and len(killed_at) < KILLS:
                victim = procs.pop(rng.randrange(len(procs)))
                killed_at[victim.pid] = time.time()
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                procs.append(_spawn(env, tmp_path, spawned))
                spawned += 1
                next_kill += 2.0
            if now >= next_terminate and termination_rounds < TERMINATIONS:
                terminations += await _terminate_sessions(postgres_dsn)
                termination_rounds += 1
                next_terminate += 3.0
            await asyncio.sleep(0.1)
        elapsed = loop.time() - started
        # The workers that were never killed went through every termination: they must still be alive.
        assert all(p.poll() is None for p in procs), "a worker died on its own (see worker-*.log)"
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    try:
        assert len(killed_at) >= 3 and terminations >= 3, (len(killed_at), terminations, elapsed)
        assert await store.count_jobs() == {("default", JobState.SUCCEEDED): N}
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            cur = await conn.execute(
                """SELECT count(DISTINCT job_id), count(*) FROM jobengine.events WHERE type = 'job.succeeded'"""
            )
            assert await cur.fetchone() == (N, N)  # each job succeeded exactly once in the store
            cur = await conn.execute("SELECT count(*) FROM jobengine.jobs WHERE result::int <> (payload->>'i')::int")
            assert await cur.fetchone() == (0,)
        problems, executions = _overlaps(ledger, killed_at)
        print(f"chaos: {elapsed:.1f} s, {len(killed_at)} kills, {terminations} sessions terminated, {executions} runs")
        assert problems == [], problems[:10]
        assert executions >= N
    finally:
        await store.close()
