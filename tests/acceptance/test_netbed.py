"""A fleet across hosts (tests/support/netbed.py): a database host with its own PostgreSQL, an API host, two
scheduler hosts and three worker hosts, each a network namespace, every process started with the command and
settings of the deploy files (deploy/systemd, deploy/jobengine.env). Two partitions, each healed:

- a worker host cut off for twice the lease while its jobs run: its jobs run again elsewhere, the
  completions it reports after the heal are fenced, and it goes back to work by itself;
- the scheduler leader's host cut off for 10 s while a 1 s schedule fires: the other scheduler takes the
  lead during the partition and fires the next ticks; every tick fires once, none is missed.

The outside ledger: each execution writes ``start`` / ``end`` lines to a file of its host
(tests/support/netbed_app.py), which the partition does not reach; the job rows, the ``job.succeeded``
events and the tick records are read from the database host afterwards. Jobs sleep 50 ms (one in 50 sleeps
3 s, so the cut catches one in flight); 3 workers of 10 slots get through the 5,000, the 10 s partition
included, in about 30 s on a 2-core machine at load 20. Starting the seven processes takes most of the
rest: the whole test takes about 2 minutes there, half of that on an idle machine.
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
from dataclasses import dataclass, field
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
LONG = 3.0  # seconds one job in 50 sleeps (the others 50 ms)
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
    long: set[str] = field(default_factory=set)  # ids of the jobs that sleep LONG seconds

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
            jobs = [
                {"task": "mark", "payload": {"i": i, "sleep": LONG if i % 50 == 0 else 0.05}}
                for i in range(first, min(first + 1000, start + count))
            ]
            request = urllib.request.Request(
                f"{self.api}/api/v1/jobs/batch", data=json.dumps({"jobs": jobs}).encode(), method="POST",
                headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=60) as answer:
                ids += [job["id"] for job in json.load(answer)["jobs"]]
            self.long.update(ids[i - start] for i in range(first, first + len(jobs)) if i % 50 == 0)
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
            # The test's engine migrates the schema as it opens; the key lets the API listen beyond loopback.
            async with Engine.from_settings(Settings(database=dsn)) as engine:
                _, key = await engine.keys.create("default", ["admin"], name="netbed")
            # Every role at once, as the hosts of a fleet start; the API host's migration (its unit's
            # ExecStartPre) finds the schema current.
            start("api", "migrate")
            start("api", "api")
            for host in SCHEDULERS:
                start(host, "scheduler")
            for host in WORKERS:
                start(host, "worker")
            migrate = next(iter(procs.procs))
            assert migrate.wait(120) == 0, procs.output(migrate)
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
    victim = "worker3"
    async with Engine.from_settings(Settings(database=fleet.dsn)) as engine:
        await engine.schedules.create(
            ScheduleSpec(name="tick", every=1, template=JobTemplate(task="mark", payload={"sleep": 0.01}))
        )
        ids = fleet.enqueue(N, 0)

        # A worker host cut off for twice the lease while it runs jobs: cut while it is 1 s into a long one,
        # so at least that job is in flight there.
        async def victim_in_a_long_job() -> bool:
            lines = [line for line in fleet.lines() if line.host == victim]
            ended = {(line.job, line.attempt) for line in lines if line.kind == "end"}
            long_jobs = [line for line in lines if line.kind == "start" and line.job in fleet.long]
            return len(lines) > 200 and any(
                (line.job, line.attempt) not in ended and time.time() - line.at < 1 for line in long_jobs
            )

        await _until(victim_in_a_long_job, f"{victim} to run jobs, a long one among them")
        fleet.bed.cut(victim)
        await asyncio.sleep(2 * LEASE)
        fleet.bed.heal(victim)
        healed = time.time()

        async def succeeded(job_ids: list[str]) -> bool:
            return {j.state for j in await engine.get_jobs(job_ids)} == {JobState.SUCCEEDED}

        await _until(lambda: succeeded(ids), f"{N} jobs to succeed")

        # The healed worker rejoins by itself: it completes jobs enqueued after the heal (a batch every
        # few seconds until it has, each enough to keep every worker busy for a moment).
        deadline = time.monotonic() + 60
        more = N
        while not any(e.host == victim and e.kind == "end" and e.at > healed for e in fleet.lines()):
            assert time.monotonic() < deadline, f"{victim} completed no job in the 60 s after the heal"
            fleet.enqueue(150, more)
            more += 150
            await asyncio.sleep(3)

        # The scheduler leader's host cut off for 10 s while the 1 s schedule fires.
        last = await _rows(fleet.dsn, "SELECT fired_by FROM jobengine.schedule_ticks ORDER BY tick_ms DESC LIMIT 1")
        assert last, "the schedule fired no tick"
        leader = next(h for h in SCHEDULERS if f":{fleet.pids[h]}:" in str(last[0][0]))
        fleet.bed.cut(leader)
        cut = time.time()
        await asyncio.sleep(SCHEDULER_CUT)
        fleet.bed.heal(leader)
        rejoined = time.time()
        await asyncio.sleep(3)
        await engine.schedules.pause("tick")
        await _until(lambda: _all_ended(fleet.dsn), "every job to end", ceiling=60)

    jobs = {
        str(r[0]): (str(r[1]), int(str(r[2])))
        for r in await _rows(fleet.dsn, "SELECT id, state, attempt FROM jobengine.jobs")
    }
    assert set(ids) <= set(jobs)
    events = Counter(
        str(r[0]) for r in await _rows(fleet.dsn, "SELECT job_id FROM jobengine.events WHERE type = 'job.succeeded'")
    )
    lines = fleet.lines()
    ends: dict[str, list[Line]] = defaultdict(list)
    for line in lines:
        if line.kind == "end":
            ends[line.job].append(line)

    # Every job (the N, those after the heal, the schedule's) succeeded exactly once, and the ledger holds
    # the execution of its successful attempt.
    assert {state for state, _ in jobs.values()} == {"succeeded"}
    assert [i for i in jobs if events[i] != 1] == []
    assert [i for i, (_, attempt) in jobs.items() if attempt not in {e.attempt for e in ends[i]}] == []
    # The cut worker finished jobs whose leases it had lost meanwhile: it reported them after the heal, and
    # those reports were fenced; each of those jobs succeeded in a later attempt.
    fenced = [i for i, (_, attempt) in jobs.items() if any(e.host == victim and e.attempt < attempt for e in ends[i])]
    assert fenced, "the partition caught no job of the cut worker in flight"
    # The same process, rejoined: jobs it ran after the heal succeeded in the attempt it ran.
    after = [
        e
        for i, (_, attempt) in jobs.items()
        for e in ends[i]
        if e.host == victim and e.at > healed and e.attempt == attempt
    ]
    assert after and {e.pid for e in after} == {fleet.pids[victim]}
    # ... and keeps them: once it has registered again (within a lease of the heal), no job it starts is
    # taken from it as from a dead worker.
    starts = [e for e in lines if e.host == victim and e.kind == "start" and e.at > healed + LEASE]
    assert starts and [e.job for e in starts if jobs[e.job][1] != e.attempt] == []

    # Every tick fired once, none missed, none later than the misfire grace; while the leader was cut off,
    # the other scheduler fired.
    fired = [
        (int(str(r[0])), float(str(r[1])), str(r[2]), str(r[3]))
        for r in await _rows(
            fleet.dsn, "SELECT tick_ms, fired_at, fired_by, run_id FROM jobengine.schedule_ticks ORDER BY tick_ms"
        )
    ]
    tick_ms = [t for t, _, _, _ in fired]
    assert tick_ms == list(range(tick_ms[0], tick_ms[-1] + 1000, 1000)), "a tick was missed"
    assert [t for t, at, _, _ in fired if at - t / 1000 > GRACE] == []
    other = next(h for h in SCHEDULERS if h != leader)
    during = [by for _, at, by, _ in fired if cut < at < rejoined]
    assert during and all(f":{fleet.pids[other]}:" in by for by in during), (leader, during)
    # The outside ledger: each tick's run ran one job, whose successful attempt it recorded once.
    runs = {run: t for t, _, _, run in fired}
    ran = Counter(
        runs[e.run] for i, (_, attempt) in jobs.items() for e in ends[i] if e.run in runs and e.attempt == attempt
    )
    assert set(ran) == set(tick_ms) and set(ran.values()) == {1}, ran


async def _all_ended(dsn: str) -> bool:
    rows = await _rows(dsn, "SELECT count(*) FROM jobengine.jobs WHERE state NOT IN ('succeeded', 'dead', 'cancelled')")
    return int(str(rows[0][0])) == 0
