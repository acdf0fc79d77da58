"""Fleets of worker processes on PostgreSQL, with the database transport, Redis and NATS delivery.

- A rolling deploy: workers running old code (task ``a``) share the queue with one restarted with new code
  (tasks ``a`` and ``b``); every job succeeds exactly once and no attempt is spent where the task is missing.
- A worker SIGKILLed while it holds jobs: they run again on another worker long before their lease would
  have expired, because the dead process's liveness ended with it.

An outside ledger (tests/support/fleet_app.py) records every execution with its worker's pid.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.processes import Processes
from support.services import unique_name

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.support.fleet_app:app"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass
class Fleet:
    procs: Processes
    settings: Settings
    ledger: Path

    def worker(self, tasks: str, *args: str) -> subprocess.Popen[bytes]:
        return self.procs.spawn(f"worker{len(self.procs.procs)}", "worker", "--app", APP, *args,
                                env={"FLEET_TASKS": tasks})  # fmt: skip

    def ready(self, p: subprocess.Popen[bytes]) -> None:
        self.procs.wait_output(p, "started on queues", 120)

    def lines(self) -> list[list[str]]:
        if not self.ledger.exists():
            return []
        return [line.split() for line in self.ledger.read_text().splitlines() if line.strip()]


def _nats_yaml(name: str) -> str:
    up = name.upper()
    return f"""queue:
  kind: nats
  nats:
    planner: {{stream: P_{up}, subject: {name}.planner, durableConsumer: {name}-planners,
              deadLetterStream: P_{up}_DEAD, deadLetterSubject: {name}.planner.dead}}
    runner: {{stream: R_{up}, subject: {name}.runner, durableConsumer: {name}-runners,
             deadLetterStream: R_{up}_DEAD, deadLetterSubject: {name}.runner.dead}}
"""


async def _drop_nats_streams(name: str) -> None:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        js = nc.jetstream()
        up = name.upper()
        for stream in (f"P_{up}", f"P_{up}_DEAD", f"R_{up}", f"R_{up}_DEAD"):
            with contextlib.suppress(Exception):
                await js.delete_stream(stream)
    finally:
        await nc.close()


@pytest.fixture(params=["database", "redis", "nats"])
async def fleet(request: pytest.FixtureRequest, postgres_dsn: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    kind = request.param
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JOBENGINE_DATABASE": postgres_dsn,
        "LEDGER": str(tmp_path / "ledger.txt"),
        "JOBENGINE_POLL_INTERVAL": "0.2",
        "JOBENGINE_LEASE_SECONDS": "60",
        "JOBENGINE_HEARTBEAT_INTERVAL": "2",
        "JOBENGINE_GRACE_PERIOD": "30",
    }
    nats_name = ""
    if kind == "redis":
        env["JOBENGINE_QUEUE_KIND"] = "redis"
        env["JOBENGINE_QUEUE_REDIS_URL"] = request.getfixturevalue("redis_url")
    elif kind == "nats":
        request.getfixturevalue("nats_url")  # skips (fails under CI) without NATS
        nats_name = unique_name("fleet").replace("_", "-")
        (tmp_path / "jobengine.yaml").write_text(_nats_yaml(nats_name))
    settings = Settings.load(tmp_path / "jobengine.yaml" if nats_name else None, env)
    procs = Processes(tmp_path, env, tmp_path)
    try:
        yield Fleet(procs, settings, tmp_path / "ledger.txt")
    finally:
        procs.stop_all()
        if nats_name:
            await _drop_nats_streams(nats_name)


async def _wait(check: Callable[[], object], ceiling: float, what: str) -> None:
    deadline = time.monotonic() + ceiling
    while not await check():  # type: ignore[misc]
        assert time.monotonic() < deadline, f"timed out after {ceiling:g}s waiting for {what}"
        await asyncio.sleep(0.2)


async def test_a_rolling_deploy_runs_every_job_once_where_its_task_is(fleet: Fleet) -> None:
    engine = Engine.from_settings(fleet.settings)
    async with engine:
        old = [fleet.worker("a") for _ in range(3)]
        for p in old:
            fleet.ready(p)
        first = await engine.enqueue_many([engine.new_job("a", {"i": i}) for i in range(1000)])

        async def some_ran() -> bool:
            return sum(1 for line in fleet.lines() if line[0] == "end") >= 200

        await _wait(some_ran, 120, "200 jobs of task a to run")
        # One worker is redeployed with code that adds task b; the other two still run the old code.
        old[0].send_signal(signal.SIGTERM)
        assert old[0].wait(60) == 0, fleet.procs.output(old[0])
        new = fleet.worker("a,b")
        fleet.ready(new)
        second = await engine.enqueue_many([engine.new_job("b", {"i": i}) for i in range(200)])
        ids = {j.id for j in first + second}

        async def all_done() -> bool:
            counts = await engine.count_jobs()
            return sum(n for (_, state), n in counts.items() if state is JobState.SUCCEEDED) == len(ids)

        await _wait(all_done, 240, "every job to succeed")
        finals = await engine.store.get_jobs(list(ids))
    assert {j.state for j in finals} == {JobState.SUCCEEDED}
    # No attempt was spent anywhere: no job failed, none was claimed by a worker that could not run it.
    assert [j for j in finals if j.attempt != 1 or j.errors] == []
    ends = collections.Counter(line[1] for line in fleet.lines() if line[0] == "end")
    assert set(ends) == ids and set(ends.values()) == {1}, "a job ran to its end more than once"
    b_pids = {line[2] for line in fleet.lines() if line[4] == "b"}
    assert b_pids == {str(new.pid)}, "a job of task b started on a worker without it"
    for p in [*old[1:], new]:
        p.send_signal(signal.SIGTERM)
    for p in [*old[1:], new]:
        assert p.wait(60) == 0, fleet.procs.output(p)


async def test_a_killed_workers_jobs_run_again_long_before_their_lease(fleet: Fleet) -> None:
    """The lease is 60 s; the jobs of the killed worker must finish within 45 s of the kill."""
    engine = Engine.from_settings(fleet.settings)
    async with engine:
        victim, survivor = fleet.worker("a", "--concurrency", "4"), fleet.worker("a", "--concurrency", "4")
        fleet.ready(victim)
        jobs = await engine.enqueue_many([engine.new_job("a", {"i": i, "sleep": 1.0}) for i in range(16)])
        fleet.ready(survivor)

        async def victim_holds_jobs() -> bool:
            return any(line[0] == "start" and line[2] == str(victim.pid) for line in fleet.lines())

        await _wait(victim_holds_jobs, 60, "the first worker to start jobs")
        fleet.procs.kill(victim)

        async def all_done() -> bool:
            return {j.state for j in await engine.store.get_jobs([j.id for j in jobs])} == {JobState.SUCCEEDED}

        await _wait(all_done, 45, "the killed worker's jobs to run again (its lease is 60 s)")
        finals = await engine.store.get_jobs([j.id for j in jobs])
    rescued = [j for j in finals if j.errors]
    assert rescued, "the killed worker held no job"
    assert {e.type for j in rescued for e in j.errors} == {"WorkerDied"}, [j.errors for j in rescued]
    ends = collections.Counter(line[1] for line in fleet.lines() if line[0] == "end")
    assert set(ends.values()) == {1} and len(ends) == len(jobs)
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(60) == 0, fleet.procs.output(survivor)
