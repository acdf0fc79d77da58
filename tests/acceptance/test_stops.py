"""Clean stops on every transport: the database transport (SQLite, PostgreSQL), Redis and NATS delivery.

Three ``jobengine worker`` processes share a queue while jobs of varying length keep arriving; each is sent
SIGTERM at a random moment of its claim / run / report cycle, several rounds, and restarted. Each must stop
claiming at once (no job starts on it once it has said "stopping"), exit 0 within the grace period, and
hand back nothing half done: in the end every job succeeded exactly once with its first attempt. Then a
second SIGTERM with a long job in flight: the worker exits at once and the job runs again elsewhere, its
interrupted attempt not counted.

The outside ledger (tests/support/fleet_app.py) records every execution with its worker's pid and time.
"""

from __future__ import annotations

import asyncio
import collections
import random
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from jobengine.core.models import Job
from jobengine.core.states import JobState
from jobengine.engine import Engine
from support.fleet import Fleet, fleet_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GRACE = 5.0  # longer than any job of the rounds: a first SIGTERM lets every job in flight finish
#: How long a worker may take to exit after SIGTERM: its grace period, and room for a loaded machine.
EXIT_CEILING = GRACE + 30
STOPS = 6
LENGTHS = (0.01, 0.01, 0.05, 0.2, 0.5, 1.0, 1.5)  # seconds a job sleeps: most short, some ~1-2 s


@pytest.fixture(params=["sqlite", "postgres", "redis", "nats"])
async def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Fleet]:
    settings = {
        "JOBENGINE_POLL_INTERVAL": "0.2",
        # Longer than the test: a job left running by a stop would be found stuck, not quietly rescued.
        "JOBENGINE_LEASE_SECONDS": "120",
        "JOBENGINE_HEARTBEAT_INTERVAL": "2",
        "JOBENGINE_GRACE_PERIOD": str(GRACE),
    }
    async with fleet_for(request.param, request, tmp_path, settings) as f:
        yield f


async def _until(check: Callable[[], Awaitable[bool] | bool], ceiling: float, what: str) -> None:
    """Wait without blocking the loop (the enqueuer runs beside it), failing after ``ceiling`` seconds."""
    deadline = time.monotonic() + ceiling
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        assert time.monotonic() < deadline, f"timed out after {ceiling:g}s waiting for {what}"
        await asyncio.sleep(0.05)


class Stops:
    """The fleet's workers, and when each was seen stopping."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.stopping_seen: dict[int, float] = {}  # pid -> when the test read its "stopping" line

    def spawn(self) -> subprocess.Popen[bytes]:
        return self.fleet.worker("a", "--concurrency", "4")

    async def start(self, n: int) -> list[subprocess.Popen[bytes]]:
        workers = [self.spawn() for _ in range(n)]
        for w in workers:
            await self.ready(w)
        return workers

    async def ready(self, w: subprocess.Popen[bytes]) -> None:
        await _until(lambda: self.started(w), 90, f"{self.fleet.procs.procs[w]} to start")

    def started(self, w: subprocess.Popen[bytes]) -> bool:
        assert w.poll() is None, self.fleet.procs.output(w)
        return "started on queues" in self.fleet.procs.output(w)

    async def sigterm(self, w: subprocess.Popen[bytes]) -> None:
        """SIGTERM ``w`` and note when its "stopping" line is seen: no job may start on it after that."""
        w.send_signal(signal.SIGTERM)
        out = self.fleet.procs
        await _until(lambda: "SIGTERM: stopping" in out.output(w) or w.poll() is not None, 60, "stopping")
        self.stopping_seen[w.pid] = time.time()

    async def exited(self, w: subprocess.Popen[bytes]) -> None:
        name = self.fleet.procs.procs[w]
        await _until(lambda: w.poll() is not None, EXIT_CEILING, f"{name} to exit after SIGTERM")
        assert w.returncode == 0, self.fleet.procs.output(w)
        assert "Traceback" not in self.fleet.procs.output(w), self.fleet.procs.output(w)

    def late_starts(self) -> list[list[str]]:
        """Ledger ``start`` lines of a worker after it was seen stopping."""
        return [
            line
            for line in self.fleet.lines()
            if line[0] == "start" and float(line[5]) > self.stopping_seen.get(int(line[2]), float("inf"))
        ]


async def _enqueue_until(engine: Engine, stop: asyncio.Event, ids: list[str]) -> None:
    rng = random.Random(7)
    while not stop.is_set():
        jobs = [engine.new_job("a", {"sleep": rng.choice(LENGTHS)}) for _ in range(rng.randint(1, 3))]
        ids += [j.id for j in await engine.enqueue_many(jobs)]
        await asyncio.sleep(rng.uniform(0.05, 0.2))


async def test_sigterm_at_random_moments_stops_cleanly_and_loses_nothing(fleet: Fleet) -> None:
    rng = random.Random()
    stops = Stops(fleet)
    ids: list[str] = []
    engine = Engine.from_settings(fleet.settings)
    async with engine:
        workers = await stops.start(3)
        arriving = asyncio.Event()
        enqueuer = asyncio.create_task(_enqueue_until(engine, arriving, ids))
        stopped: list[subprocess.Popen[bytes]] = []
        try:
            # A rolling restart at random moments while jobs arrive: one running worker at a time is stopped
            # and a new one started at once (a stop while starting: test_sigterm_while_the_worker_starts...).
            for _ in range(STOPS):
                await asyncio.sleep(rng.uniform(0.2, 1.5))
                running = [i for i, w in enumerate(workers) if stops.started(w)]
                if not running:
                    await stops.ready(workers[0])
                    running = [0]
                i = rng.choice(running)
                await stops.sigterm(workers[i])
                stopped.append(workers[i])
                workers[i] = stops.spawn()
            for w in stopped:
                await stops.exited(w)
        finally:
            arriving.set()
            await enqueuer
        for w in workers:
            await stops.ready(w)

        async def all_succeeded() -> bool:
            finals = await engine.store.get_jobs(ids)
            return len(finals) == len(ids) and all(j.state is JobState.SUCCEEDED for j in finals)

        await _until(all_succeeded, 120, "every job to succeed on fresh workers")
        finals = await engine.store.get_jobs(ids)
        for w in workers:
            await stops.sigterm(w)
        for w in workers:
            await stops.exited(w)

    assert stops.late_starts() == [], "a job started on a worker after it said it was stopping"
    assert [_summary(j) for j in finals if j.attempt != 1 or j.errors] == [], "a stop spent an attempt"
    starts = collections.Counter(line[1] for line in fleet.lines() if line[0] == "start")
    ends = collections.Counter(line[1] for line in fleet.lines() if line[0] == "end")
    assert set(ends) == set(ids) and set(ends.values()) == {1}, "a job ran to its end twice, or never"
    # The grace period outlasts every job: no job was interrupted and run again.
    assert set(starts.values()) == {1}, [i for i, n in starts.items() if n > 1]


async def test_a_second_sigterm_releases_the_job_in_flight_at_once(fleet: Fleet) -> None:
    stops = Stops(fleet)
    engine = Engine.from_settings(fleet.settings)
    async with engine:
        first = fleet.worker("a", "--grace", "300")
        await _until(lambda: stops.started(first), 90, "the worker to start")
        (job,) = await engine.enqueue_many([engine.new_job("a", {"sleep": 20, "again": 0.01})])

        def started() -> bool:
            return any(line[0] == "start" and line[1] == job.id for line in fleet.lines())

        await _until(started, 60, "the long job to start")
        await stops.sigterm(first)
        await asyncio.sleep(0.5)
        assert first.poll() is None, "the first SIGTERM waits for the job (grace period 300 s)"
        first.send_signal(signal.SIGTERM)
        # At once: well before the job's 20 s, and nothing like its grace period.
        await _until(lambda: first.poll() is not None, 15, "the worker to exit after a second SIGTERM")
        assert first.returncode == 0, fleet.procs.output(first)
        assert "releasing jobs in flight now" in fleet.procs.output(first)
        (released,) = await engine.store.get_jobs([job.id])
        assert (released.state, released.attempt, released.errors) == (JobState.QUEUED, 0, ())

        # Another worker runs it from the start (briefly, this time); the interrupted attempt is not counted.
        (second,) = await stops.start(1)

        async def succeeded() -> bool:
            return (await engine.store.get_jobs([job.id]))[0].state is JobState.SUCCEEDED

        await _until(succeeded, 90, "the released job to run again")
        (final,) = await engine.store.get_jobs([job.id])
        await stops.sigterm(second)
        await stops.exited(second)
    assert (final.attempt, final.errors) == (1, ()), _summary(final)
    runs = [(line[0], line[2]) for line in fleet.lines() if line[1] == job.id]
    assert runs == [("start", str(first.pid)), ("start", str(second.pid)), ("end", str(second.pid))]


def _summary(job: Job) -> tuple[str, str, int, list[str]]:
    return job.id, job.state.value, job.attempt, [f"{e.type}: {e.message}" for e in job.errors]


SLOW_IMPORT = """import pathlib, time
pathlib.Path("importing").touch()
time.sleep({seconds})
from tests.support.fleet_app import app
"""


@pytest.mark.parametrize("signals", [1, 2])
async def test_sigterm_while_the_worker_starts_is_a_clean_stop(
    request: pytest.FixtureRequest, tmp_path: Path, signals: int
) -> None:
    """A signal that comes while the app is imported (before the worker runs) stops it the same way: exit 0,
    nothing claimed. The second one ends it at once, as nothing is in flight."""
    async with fleet_for("sqlite", request, tmp_path, {"JOBENGINE_POLL_INTERVAL": "0.2"}) as fleet:
        (tmp_path / "slow_app.py").write_text(SLOW_IMPORT.format(seconds=3 if signals == 1 else 600))
        engine = Engine.from_settings(fleet.settings)
        async with engine:
            (job,) = await engine.enqueue_many([engine.new_job("a")])
            w = fleet.procs.spawn("worker", "worker", "--app", "slow_app:app")
            await _until(lambda: (tmp_path / "importing").exists() or w.poll() is not None, 90, "the app's import")
            for _ in range(signals):
                w.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.2)
            await _until(lambda: w.poll() is not None, 60, "the worker to exit")
            assert w.returncode == 0, fleet.procs.output(w)
            if signals == 1:
                assert "SIGTERM: stopping" in fleet.procs.output(w)
            (final,) = await engine.store.get_jobs([job.id])
        assert (final.state, final.attempt) == (JobState.QUEUED, 0)
        assert fleet.lines() == []
