"""PostgreSQL itself restarted, killed, then stopped for a while, under a running fleet: every process
reconnects by itself and nothing is lost or run twice.

The test's own cluster (tests/support/pgcluster.py) on a loopback port; the API, the scheduler (a 1 s
schedule) and two workers run as the deploy files start them (deploy/jobengine.env, the systemd commands).
Jobs go in through the API in batches. With part of them done, the server is restarted (``pg_ctl restart
-m fast``: every session ended, the server down until it is back); later it is SIGKILLed (a crash: no
shutdown, crash recovery at the next start) and started again; last, it is stopped for 10 s. After each,
without restarting anything:

- the API answers and takes more jobs, which the workers run;
- the scheduler fires the next ticks;
- the same processes are alive (their pids), and the workers still hold their liveness.

The outside ledger: each execution writes ``start`` / ``end`` lines to a file of its process
(tests/support/netbed_app.py). At the end every job succeeded exactly once in the store (one
``job.succeeded`` event), its successful attempt is in the ledger, and no job ran to its end twice: a
restart fences out no live worker. Every tick fired once, none was missed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.deploy import ROOT, DeployFiles
from support.pgcluster import Cluster, free_port, postgres_cluster
from support.processes import Processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

N = 3_000  # jobs before the first restart; 300 more after each outage, 1,000 more before the 2nd and 3rd
OUTAGE = 10.0  # seconds the server is stopped in the third outage: within the misfire grace (15 s)
WORKERS = ("worker1", "worker2")


@dataclass
class Fleet:
    cluster: Cluster
    procs: Processes
    ledger: Path
    api: str
    key: str
    pids: dict[str, int]  # process name -> pid

    def lines(self) -> list[list[str]]:
        """``[kind, job, attempt, pid, at, run, process]`` of every ledger line."""
        found = []
        for path in self.ledger.glob("*.txt"):
            found += [[*text.split(), path.stem] for text in path.read_text().splitlines() if text]
        return found

    def api_call(self, method: str, path: str, body: object = None) -> Any:
        request = urllib.request.Request(
            f"{self.api}{path}", data=None if body is None else json.dumps(body).encode(), method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.load(answer)

    def enqueue(self, count: int, start: int) -> list[str]:
        """``count`` jobs through the API, in batches of 500; their ids."""
        ids: list[str] = []
        for first in range(start, start + count, 500):
            jobs = [
                {"task": "mark", "payload": {"i": i, "sleep": 0.02}}
                for i in range(first, min(first + 500, start + count))
            ]
            ids += [job["id"] for job in self.api_call("POST", "/api/v1/jobs/batch", {"jobs": jobs})["jobs"]]
        return ids

    def alive(self) -> None:
        """Every process started is still the one running (none exited, none was restarted)."""
        for p, name in self.procs.procs.items():
            assert p.poll() is None, f"{name} exited: {self.procs.output(p)[-3000:]}"
            assert self.pids[name] == p.pid


async def _until(check: Callable[[], Awaitable[bool]], what: str, ceiling: float = 120.0) -> None:
    deadline = time.monotonic() + ceiling
    while not await check():
        assert time.monotonic() < deadline, f"timed out after {ceiling:g}s waiting for {what}"
        await asyncio.sleep(0.2)


async def _rows(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        return await (await conn.execute(sql.encode(), params)).fetchall()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with postgres_cluster() as made:
        yield made


@pytest.fixture
async def fleet(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Fleet]:
    files = DeployFiles.read()
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    port = free_port()
    env = {
        **os.environ,
        **files.environment,
        "PYTHONPATH": str(ROOT),
        "JOBENGINE_APP": "tests.support.netbed_app:app",
        "JOBENGINE_DATABASE": cluster.dsn,
        "JOBENGINE_API_HOST": "127.0.0.1",
        "JOBENGINE_API_PORT": str(port),
        "JOBENGINE_WORKER_METRICS_PORT": "0",  # two workers on one host
        "JOBENGINE_POLL_INTERVAL": "0.5",
        "JOBENGINE_LOG_FORMAT": "text",
        "NETBED_LEDGER": str(ledger),
    }
    procs = Processes(tmp_path, env, ROOT)
    try:
        async with Engine.from_settings(Settings(database=cluster.dsn)) as engine:  # migrates the schema
            _, key = await engine.keys.create("default", ["admin"], name="restart")
        ready = {"api": "jobengine serve", "scheduler": "jobengine scheduler", "worker": "started on queues"}
        for name in ("api", "scheduler", *WORKERS):
            role = name.rstrip("0123456789")
            argv = [sys.executable, "-m", "jobengine", *files.command(role, env)]
            procs.run(name, argv, {"NETBED_HOST": name, "JOBENGINE_STATE_DIR": str(tmp_path / f"state-{name}")})
        for p, name in procs.procs.items():
            procs.wait_output(p, ready[name.rstrip("0123456789")], 120)
        pids = {name: p.pid for p, name in procs.procs.items()}
        yield Fleet(cluster, procs, ledger, f"http://127.0.0.1:{port}", key, pids)
    finally:
        procs.stop_all()


async def _in_flight(fleet: Fleet, ids: list[str]) -> None:
    """Until one of ``ids`` has started: the outage that follows comes while jobs run."""
    wanted = set(ids)

    async def started() -> bool:
        return any(line[0] == "start" and line[1] in wanted for line in fleet.lines())

    await _until(started, "jobs of the batch to start")


async def _all_succeeded(fleet: Fleet, ids: list[str]) -> bool:
    sql = "SELECT count(*) FROM jobengine.jobs WHERE state = 'succeeded' AND id = ANY(%s)"
    rows = await _rows(fleet.cluster.dsn, sql, (ids,))
    return int(rows[0][0]) == len(ids)


async def _ticks(dsn: str) -> list[tuple[int, float]]:
    return [
        (int(r[0]), float(r[1]))
        for r in await _rows(dsn, "SELECT tick_ms, fired_at FROM jobengine.schedule_ticks ORDER BY tick_ms")
    ]


async def _back_at_work(fleet: Fleet, since: float, start: int) -> list[str]:
    """After an outage that ended at ``since``: the API answers and takes jobs that the workers (each of them)
    run, and the scheduler fires ticks again. The jobs' ids."""
    health = await asyncio.to_thread(fleet.api_call, "GET", "/readyz")
    assert health, health
    ids = await asyncio.to_thread(fleet.enqueue, 300, start)
    await _until(lambda: _all_succeeded(fleet, ids), "the jobs enqueued after the outage to succeed")

    async def ticks_after() -> bool:
        return sum(1 for _, at in await _ticks(fleet.cluster.dsn) if at > since) >= 3

    await _until(ticks_after, "three ticks fired after the outage")

    async def sessions_held() -> bool:
        """Both workers registered, and their liveness locks and the scheduler's leadership held again."""
        workers = await _rows(fleet.cluster.dsn, "SELECT count(*) FROM jobengine.workers WHERE lock_key IS NOT NULL")
        locks = await _rows(fleet.cluster.dsn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")
        return int(workers[0][0]) == len(WORKERS) and int(locks[0][0]) == len(WORKERS) + 1

    await _until(sessions_held, "the workers' liveness and the scheduler's leadership to be held again", 60)
    ran = {line[6] for line in fleet.lines() if line[0] == "end" and float(line[4]) > since}
    assert set(WORKERS) <= ran, f"a worker ran no job after the outage: {ran}"
    fleet.alive()
    return ids


async def test_a_restarted_and_a_killed_postgres_lose_nothing_and_run_nothing_twice(fleet: Fleet) -> None:
    dsn = fleet.cluster.dsn
    async with Engine.from_settings(Settings(database=dsn)) as engine:
        await engine.schedules.create(
            ScheduleSpec(name="tick", every=1, template=JobTemplate(task="mark", payload={"sleep": 0.01}))
        )
    ids = await asyncio.to_thread(fleet.enqueue, N, 0)

    async def some_done() -> bool:
        return sum(1 for line in fleet.lines() if line[0] == "end") >= N // 4

    await _until(some_done, "a quarter of the jobs to run")
    started = time.time()
    await asyncio.to_thread(fleet.cluster.restart, "fast")
    restarted = time.time()
    print(f"restart -m fast: server down {restarted - started:.1f} s")
    await _until(lambda: _all_succeeded(fleet, ids), f"the {N} jobs to succeed after the restart")
    ids += await _back_at_work(fleet, restarted, N)

    # The hard variant: the postmaster killed while jobs run, started again a moment later.
    more = await asyncio.to_thread(fleet.enqueue, 1000, N + 300)
    await _in_flight(fleet, more)
    started = time.time()
    await asyncio.to_thread(fleet.cluster.kill)
    await asyncio.to_thread(fleet.cluster.start)
    restarted = time.time()
    print(f"SIGKILL and start: server down {restarted - started:.1f} s")
    await _until(lambda: _all_succeeded(fleet, more), "the jobs in flight at the kill to succeed")
    ids += more + await _back_at_work(fleet, restarted, N + 1300)

    # A long outage: the server stopped while jobs run, and started again OUTAGE seconds later.
    more = await asyncio.to_thread(fleet.enqueue, 1000, N + 1600)
    await _in_flight(fleet, more)
    started = time.time()
    await asyncio.to_thread(fleet.cluster.stop, "fast")
    await asyncio.sleep(OUTAGE)
    await asyncio.to_thread(fleet.cluster.start)
    restarted = time.time()
    print(f"stop, {OUTAGE:g} s, start: server down {restarted - started:.1f} s")
    await _until(lambda: _all_succeeded(fleet, more), "the jobs in flight at the stop to succeed")
    ids += more + await _back_at_work(fleet, restarted, N + 2600)

    async with Engine.from_settings(Settings(database=dsn)) as engine:
        await engine.schedules.pause("tick")
    await _until(lambda: _none_open(dsn), "every job (the schedule's too) to end", ceiling=60)
    fleet.alive()

    jobs = {
        str(r[0]): (str(r[1]), int(r[2])) for r in await _rows(dsn, "SELECT id, state, attempt FROM jobengine.jobs")
    }
    assert set(ids) <= set(jobs)
    assert {state for state, _ in jobs.values()} == {"succeeded"}
    events = Counter(
        str(r[0]) for r in await _rows(dsn, "SELECT job_id FROM jobengine.events WHERE type = 'job.succeeded'")
    )
    assert [i for i in jobs if events[i] != 1] == [], "a job succeeded twice, or its event was lost"
    ends: dict[str, list[list[str]]] = {}
    for line in fleet.lines():
        if line[0] == "end":
            ends.setdefault(line[1], []).append(line)
    assert [i for i, (_, attempt) in jobs.items() if str(attempt) not in {e[2] for e in ends.get(i, [])}] == []
    twice = {i: [(e[2], e[6]) for e in ran] for i, ran in ends.items() if len(ran) > 1}
    assert twice == {}, f"jobs ran to their end more than once: {list(twice.items())[:10]}"
    # Every tick fired once, none missed across the two outages.
    ticks = [t for t, _ in await _ticks(dsn)]
    assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000)), "a tick was missed"
    # Each process is the one started, and stops cleanly.
    for p in fleet.procs.procs:
        p.send_signal(signal.SIGTERM)
    for p, name in fleet.procs.procs.items():
        assert p.wait(60) == 0, f"{name}: {fleet.procs.output(p)[-3000:]}"


async def _none_open(dsn: str) -> bool:
    rows = await _rows(dsn, "SELECT count(*) FROM jobengine.jobs WHERE state NOT IN ('succeeded', 'dead', 'cancelled')")
    return int(rows[0][0]) == 0
