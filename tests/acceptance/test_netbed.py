"""A fleet across hosts (tests/support/netbed.py): a database host with its own PostgreSQL, an API host, two
scheduler hosts and three worker hosts, each a network namespace, every process started with the command and
settings of the deploy files (deploy/systemd, deploy/jobengine.env). Two partitions, each healed:

- a worker host cut off for twice the lease while its jobs run: its jobs run again elsewhere, the
  completions it reports after the heal are fenced, and it goes back to work by itself;
- the scheduler leader's host cut off for 10 s while a 1 s schedule fires: the other scheduler takes the
  lead during the partition and fires the next ticks; every tick fires once, none is missed.

The outside ledger: each execution writes ``start`` / ``end`` lines to a file of its host
(tests/support/netbed_app.py), which the partition does not reach. Jobs sleep 50 ms; 3 workers of 10 slots
get through the 5,000 in about 20 s here, so the whole test takes about a minute.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.deploy import ROOT, DeployFiles
from support.netbed import NetBed, bed_postgres, netbed
from support.processes import Processes

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(400)]

N = 5_000
LEASE = 5.0
WORKERS = ("worker1", "worker2", "worker3")
SCHEDULERS = ("scheduler1", "scheduler2")
HOSTS = ("db", "api", *SCHEDULERS, *WORKERS)
SCHEDULER_CUT = 10.0
GRACE = 15.0  # scheduler_misfire_grace: a tick fired later than this after its time was missed


@dataclass
class Line:
    kind: str
    job: str
    attempt: int
    pid: int
    at: float
    run: str
    host: str


@dataclass
class Fleet:
    bed: NetBed
    procs: Processes
    dsn: str
    ledger: Path
    api: str
    key: str
    pids: dict[str, int]  # host -> pid of its jobengine process

    def lines(self) -> list[Line]:
        found = []
        for path in self.ledger.glob("*.txt"):
            for text in path.read_text().splitlines():
                kind, job, attempt, pid, at, run = text.split()
                found.append(Line(kind, job, int(attempt), int(pid), float(at), run, path.stem))
        return found

    def enqueue(self, count: int, start: int) -> list[str]:
        """``count`` jobs through the API host, in batches of 1,000; their ids."""
        ids: list[str] = []
        for first in range(start, start + count, 1000):
            jobs = [{"task": "mark", "payload": {"i": i}} for i in range(first, min(first + 1000, start + count))]
            request = urllib.request.Request(
                f"{self.api}/api/v1/jobs/batch", data=json.dumps({"jobs": jobs}).encode(), method="POST",
                headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=60) as answer:
                ids += [job["id"] for job in json.load(answer)["jobs"]]
        return ids


async def _until(check: Callable[[], Awaitable[bool]], what: str, ceiling: float = 120.0) -> None:
    deadline = time.monotonic() + ceiling
    while not await check():
        assert time.monotonic() < deadline, f"timed out after {ceiling:g}s waiting for {what}"
        await asyncio.sleep(0.2)


@pytest.fixture
def bed() -> Iterator[NetBed]:
    with netbed(HOSTS) as made:
        yield made


@pytest.fixture
async def fleet(bed: NetBed, tmp_path: Path) -> AsyncIterator[Fleet]:
    files = DeployFiles.read()
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    with bed_postgres(bed, "db") as dsn:
        env = {
            **os.environ,
            **files.environment,
            "PYTHONPATH": str(ROOT),
            "JOBENGINE_APP": "tests.support.netbed_app:app",
            "JOBENGINE_DATABASE": dsn,
            "JOBENGINE_LEASE_SECONDS": str(LEASE),
            "JOBENGINE_RESCUE_INTERVAL": "0.5",
            "JOBENGINE_POLL_INTERVAL": "0.2",
            "JOBENGINE_GRACE_PERIOD": "5",
            "JOBENGINE_SCHEDULER_POLL_INTERVAL": "0.2",
            "JOBENGINE_API_HOST": bed.address("api"),
            "NETBED_LEDGER": str(ledger),
        }
        procs = Processes(tmp_path, env, ROOT)

        def start(host: str, role: str) -> None:
            argv = [sys.executable, "-m", "jobengine", *files.command(role, env)]
            state = {"JOBENGINE_STATE_DIR": str(tmp_path / f"state-{host}"), "NETBED_HOST": host}
            procs.run(f"{host}-{role}", bed.argv(host, argv), state)

        try:
            # As the API unit does: migrate (its ExecStartPre), then serve.
            start("api", "migrate")
            migrate = next(iter(procs.procs))
            assert migrate.wait(120) == 0, procs.output(migrate)
            async with Engine.from_settings(Settings(database=dsn)) as engine:
                _, key = await engine.keys.create("default", ["admin"], name="netbed")
            start("api", "api")
            for host in SCHEDULERS:
                start(host, "scheduler")
            for host in WORKERS:
                start(host, "worker")
            pids = {}
            for p, name in procs.procs.items():
                host, role = name.rsplit("-", 1)
                if role == "migrate":
                    continue
                ready = {"api": "jobengine serve", "scheduler": "jobengine scheduler", "worker": "started on queues"}
                procs.wait_output(p, ready[role], 120)
                pids[host] = p.pid
            yield Fleet(bed, procs, dsn, ledger, f"http://{bed.address('api')}:8080", key, pids)
        finally:
            procs.stop_all()


async def _rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await (await conn.execute(sql)).fetchall()


async def test_partitions_heal_without_a_lost_or_repeated_job_or_tick(fleet: Fleet) -> None:
    async with Engine.from_settings(Settings(database=fleet.dsn)) as engine:
        await engine.schedules.create(
            ScheduleSpec(name="tick", every=1, template=JobTemplate(task="mark", payload={"sleep": 0.01}))
        )
        ids = fleet.enqueue(N, 0)

        # A worker host cut off while it runs jobs, for twice the lease.
        victim = "worker3"

        async def victim_busy() -> bool:
            return sum(1 for line in fleet.lines() if line.host == victim and line.kind == "start") >= 200

        await _until(victim_busy, f"{victim} to run 200 jobs")
        fleet.bed.cut(victim)
        await asyncio.sleep(2 * LEASE)
        fleet.bed.heal(victim)
        healed = time.time()

        async def succeeded(job_ids: list[str]) -> bool:
            jobs = await engine.get_jobs(job_ids)
            return all(j.state is JobState.SUCCEEDED for j in jobs)

        await _until(lambda: succeeded(ids), f"{N} jobs to succeed")
        # The healed worker rejoins by itself: it runs and completes jobs enqueued after the heal.
        more = fleet.enqueue(600, N)
        await _until(lambda: succeeded(more), "600 more jobs to succeed")

        # The scheduler leader's host cut off for 10 s while the 1 s schedule fires.
        ticks = await _rows(fleet.dsn, "SELECT fired_by FROM jobengine.schedule_ticks ORDER BY tick_ms DESC LIMIT 1")
        assert ticks, "the schedule fired no tick"
        leader = next(h for h in SCHEDULERS if f":{fleet.pids[h]}:" in str(ticks[0][0]))
        fleet.bed.cut(leader)
        cut = time.time()
        await asyncio.sleep(SCHEDULER_CUT)
        fleet.bed.heal(leader)
        rejoined = time.time()
        await asyncio.sleep(3)
        await engine.schedules.pause("tick")
        await _until(lambda: _all_ended(fleet.dsn), "every job the schedule fired to end", ceiling=60)

        jobs = {j.id: j for j in await engine.get_jobs([*ids, *more])}
    events = Counter(
        str(r[0]) for r in await _rows(fleet.dsn, "SELECT job_id FROM jobengine.events WHERE type = 'job.succeeded'")
    )
    lines = fleet.lines()
    ends: dict[str, list[Line]] = defaultdict(list)
    for line in lines:
        if line.kind == "end":
            ends[line.job].append(line)

    # Every job succeeded exactly once, and its successful attempt is in the ledger.
    assert {j.state for j in jobs.values()} == {JobState.SUCCEEDED}
    assert all(events[i] == 1 for i in jobs), [i for i in jobs if events[i] != 1][:5]
    assert [i for i, j in jobs.items() if j.attempt not in {e.attempt for e in ends[i]}] == []
    # The partitioned worker finished jobs whose leases it had lost: those completions were fenced, and
    # each of those jobs succeeded in a later attempt.
    fenced = [i for i, j in jobs.items() if any(e.host == victim and e.attempt < j.attempt for e in ends[i])]
    assert fenced, "the partition caught no job of the cut worker in flight"
    # The same process, rejoined: it completed jobs enqueued after the heal, in their successful attempt.
    rejoined_jobs = [
        i for i in more if any(e.host == victim and e.at > healed and e.attempt == jobs[i].attempt for e in ends[i])
    ]
    assert rejoined_jobs, f"{victim} ran none of the jobs enqueued after it was healed"
    assert {e.pid for i in rejoined_jobs for e in ends[i] if e.host == victim} == {fleet.pids[victim]}

    # Every tick fired once, none missed, none late beyond the misfire grace; during the partition the
    # other scheduler fired.
    fired = [
        (int(str(r[0])), float(str(r[1])), str(r[2]))
        for r in await _rows(
            fleet.dsn,
            "SELECT tick_ms, fired_at, fired_by FROM jobengine.schedule_ticks ORDER BY tick_ms",
        )
    ]
    tick_ms = [t for t, _, _ in fired]
    if os.environ.get("NETBED_DEBUG"):
        names = {str(pid): h for h, pid in fleet.pids.items()}
        print("cut", cut, "rejoined", rejoined, "leader", leader, "worker heal", healed, "fenced", len(fenced))
        for t, at, by in fired:
            print(t / 1000 - cut, round(at - t / 1000, 2), names.get(by.split(":")[1]))
    assert tick_ms == list(range(tick_ms[0], tick_ms[-1] + 1000, 1000)), "a tick was missed"
    assert [t for t, at, _ in fired if at - t / 1000 > GRACE] == []
    other = next(h for h in SCHEDULERS if h != leader)
    # Fired while the leader was still cut off, by the other scheduler.
    during = [by for _, at, by in fired if cut < at < rejoined]
    assert during and all(f":{fleet.pids[other]}:" in by for by in during), (leader, during)
    # The outside ledger: each tick's run ran its job once.
    runs = {
        str(r[0]): int(str(r[1]))
        for r in await _rows(fleet.dsn, "SELECT run_id, tick_ms FROM jobengine.schedule_ticks")
    }
    ran = Counter(runs[line.run] for line in lines if line.kind == "end" and line.run in runs)
    assert set(ran) == set(tick_ms) and set(ran.values()) == {1}, ran


async def _all_ended(dsn: str) -> bool:
    rows = await _rows(dsn, "SELECT count(*) FROM jobengine.jobs WHERE state NOT IN ('succeeded', 'dead', 'cancelled')")
    return int(str(rows[0][0])) == 0
