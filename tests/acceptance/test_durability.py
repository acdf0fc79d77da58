"""Worker processes on one SQLite file, killed and stopped for real: no job is lost or run twice at once."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings

from .conftest import Procs

LEASE, SWEEP = 2.0, 0.5
FAST = {
    "JOBENGINE_LEASE_SECONDS": str(LEASE),
    "JOBENGINE_RESCUE_INTERVAL": str(SWEEP),
    "JOBENGINE_HEARTBEAT_INTERVAL": "0.5",
    "JOBENGINE_POLL_INTERVAL": "0.2",
    "JOBENGINE_WORKER_CONCURRENCY": "5",
}


def open_engine(procs: Procs) -> Engine:
    return Engine.from_settings(Settings(database=procs.env["JOBENGINE_DATABASE"]))


def read_ledger(path: Path) -> list[list[str]]:
    return [line.split(" ", 5) for line in path.read_text().splitlines()] if path.exists() else []


async def wait_until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.serial
async def test_sigkill_a_worker_every_second(procs: Procs) -> None:
    procs.env.update(FAST)
    engine = open_engine(procs)
    async with engine:
        jobs = await engine.enqueue_many(
            [engine.new_job("work", {"i": i, "sleep": 0.1}, max_attempts=20) for i in range(2000)]
        )
        ids = {j.id for j in jobs}
        workers = [procs.worker() for _ in range(4)]
        kills: dict[int, float] = {}
        rng = random.Random(7)
        deadline = time.monotonic() + 180

        async def remaining() -> int:
            counts = await engine.count_jobs()
            return sum(n for (_, state), n in counts.items() if state is not JobState.SUCCEEDED)

        await asyncio.sleep(1.0)
        while await remaining() and time.monotonic() < deadline:
            victim = rng.choice(workers)
            procs.kill(victim)
            kills[victim.pid] = time.time()
            workers[workers.index(victim)] = procs.worker()
            await asyncio.sleep(1.0)
        assert await remaining() == 0, "not every job succeeded in time"
        assert len(kills) >= 5

        for w in workers:
            procs.wait_ready(w)
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(timeout=30) == 0, procs.output(w)

        finals = await engine.store.get_jobs(list(ids))
        assert {j.state for j in finals} == {JobState.SUCCEEDED}
        succeeded: Counter[str] = Counter()
        rescued_after_kill: list[float] = []
        holder: dict[str, int] = {}  # job -> pid of the worker that claimed it last
        after = 0
        while batch := await engine.events(after_id=after, limit=5000):
            for e in batch:
                if e.job_id is None:
                    continue
                if e.type == "job.succeeded":
                    succeeded[e.job_id] += 1
                elif e.type == "job.started":
                    if e.job_id in holder and holder[e.job_id] < 0:
                        # claimed again after a rescue: how long after its worker was killed?
                        rescued_after_kill.append(e.at - kills[-holder[e.job_id]])
                    holder[e.job_id] = int(str(e.data["worker"]).split(":")[1])
                elif e.type == "job.failed" and e.data.get("error_type") in ("WorkerDied", "LeaseExpired"):
                    assert holder[e.job_id] in kills, "a live worker's lease expired"
                    holder[e.job_id] = -holder[e.job_id]
            after = batch[-1].id
        assert set(succeeded) == ids and set(succeeded.values()) == {1}, "a job succeeded more than once"
        assert rescued_after_kill, "no kill landed while a worker held a job"
        # Every job of a killed worker is claimed again within lease expiry (at most LEASE after the last
        # heartbeat, which came before the kill) plus one sweep, plus a little for the claim itself.
        assert max(rescued_after_kill) <= LEASE + SWEEP + 0.5, sorted(rescued_after_kill)[-5:]

    # The ledger, kept outside the engine: executions of one job never overlap in time.
    starts: dict[tuple[str, str, str], float] = {}
    ends: dict[tuple[str, str, str], float] = {}
    for kind, job, pid, attempt, at, *_ in read_ledger(Path(procs.env["LEDGER"])):
        (starts if kind == "start" else ends)[(job, pid, attempt)] = float(at)
    runs: dict[str, list[tuple[float, float, str, bool]]] = defaultdict(list)
    for key, began in starts.items():
        job, pid, _ = key
        killed = key not in ends
        finished = kills.get(int(pid)) if killed else ends[key]
        assert finished is not None, f"execution {key} neither ended nor was killed"
        runs[job].append((began, finished, pid, killed))
    assert set(runs) == ids
    for job, spans in runs.items():
        spans.sort()
        for (_, e1, p1, _), (b2, _, p2, _) in pairwise(spans):
            assert b2 >= e1, f"job {job} ran in {p1} and {p2} at the same time"
    killed_runs = sum(killed for spans in runs.values() for *_, killed in spans)
    print(
        f"\nchaos: {len(kills)} workers SIGKILLed, {killed_runs} executions killed mid-job, "
        f"{sum(len(v) for v in runs.values())} executions of {len(ids)} jobs, {len(rescued_after_kill)} "
        f"rescues; claimed again at most {max(rescued_after_kill):.2f}s after the kill "
        f"(lease {LEASE}s + sweep {SWEEP}s)"
    )
