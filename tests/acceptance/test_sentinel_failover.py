"""5,000 jobs through Redis behind Sentinel while the master is SIGKILLed and its replica promoted: none lost,
none completed twice.

A master, a replica and three Sentinels of the test's own (tests/support/redis_sentinel.py); a PostgreSQL store;
three ``jobengine worker`` processes reaching Redis by ``redis+sentinel://``; this process enqueues in
batches. Once 1,500 jobs have ended the master is killed: the Sentinels promote the replica while workers and
the producer's relay get "unavailable" and retry, then follow the new master. Replication is asynchronous, so
messages (and acknowledgements) the old master had not passed on are lost with it; the store is the truth, and
the relay's sweep publishes again any runnable job whose message is gone. To be sure something is lost,
replication is cut a second before the kill, while the second half of the jobs is being published. An outside ledger
(tests/support/fleet_app.py) shows every job started and ended exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from pathlib import Path

import pytest

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.processes import Processes
from support.redis_sentinel import redis_sentinel

N = 5_000
KILL_AFTER = 1_500  # of the first half; the second half waits for replication to be cut
LOSE_WRITES_FOR = 1.0  # seconds of the master's writes (publishes, acknowledgements) the replica never gets
WORKERS = 3
ROOT = Path(__file__).resolve().parents[2]
APP = "tests.support.fleet_app:app"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _ledger(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


async def test_5000_jobs_through_a_sentinel_failover_none_lost_none_twice(tmp_path: Path, postgres_dsn: str) -> None:
    ledger = tmp_path / "ledger.txt"
    with redis_sentinel(tmp_path) as group:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LEDGER": str(ledger),
            "FLEET_TASKS": "a",
            "JOBENGINE_DATABASE": postgres_dsn,
            "JOBENGINE_QUEUE_KIND": "redis",
            "JOBENGINE_QUEUE_REDIS_URL": group.url(),
            "JOBENGINE_POLL_INTERVAL": "0.2",
            "JOBENGINE_LEASE_SECONDS": "30",
            "JOBENGINE_HEARTBEAT_INTERVAL": "2",
        }
        procs = Processes(tmp_path, env, tmp_path)
        try:
            workers = [procs.spawn(f"worker{i}", "worker", "--app", APP, "--concurrency", "50") for i in range(WORKERS)]
            for w in workers:
                procs.wait_output(w, "started on queues", 120)
            engine = Engine.from_settings(Settings.load(None, env))
            enqueued: list[str] = []
            ended_at_kill = lost = 0
            async with engine:

                def ended() -> int:
                    return sum(1 for line in _ledger(ledger) if line[0] == "end")

                cutting = asyncio.Event()

                async def produce() -> None:
                    for start in range(0, N, 100):
                        if start == N // 2:
                            await cutting.wait()  # the second half is published while replication is cut
                        batch = [engine.new_job("a", {"i": i}) for i in range(start, start + 100)]
                        jobs = await engine.enqueue_many(batch)
                        enqueued.extend(j.id for j in jobs)  # the store has them: they must run
                        await asyncio.sleep(0.05)

                async def fail_over() -> None:
                    nonlocal ended_at_kill, lost
                    deadline = time.monotonic() + 120
                    while ended() < KILL_AFTER:
                        assert time.monotonic() < deadline, f"only {ended()} jobs ended before the kill"
                        await asyncio.sleep(0.05)
                    await asyncio.to_thread(group.cut_replication)
                    cutting.set()
                    await asyncio.sleep(LOSE_WRITES_FOR)
                    ended_at_kill = ended()
                    lost = await asyncio.to_thread(group.fail_over)

                await asyncio.gather(produce(), fail_over())

                async def all_succeeded() -> bool:
                    counts = await engine.count_jobs()
                    return sum(n for (_, state), n in counts.items() if state is JobState.SUCCEEDED) == N

                deadline = time.monotonic() + 120
                while not await all_succeeded():
                    counts = await engine.count_jobs()
                    assert time.monotonic() < deadline, f"not every job succeeded after the failover: {counts}"
                    await asyncio.sleep(0.2)
                finals = await engine.store.get_jobs(enqueued)
            for w in workers:
                assert w.poll() is None, procs.output(w)  # no worker gave up on the broker
        finally:
            procs.stop_all()
    assert 0 < ended_at_kill < N, "the master did not die mid-run"
    assert lost > 0, "the promoted replica lacked none of the old master's writes"
    assert len(enqueued) == N
    assert {j.state for j in finals} == {JobState.SUCCEEDED}
    assert [j.id for j in finals if j.attempt != 1] == []
    lines = _ledger(ledger)
    starts = collections.Counter(line[1] for line in lines if line[0] == "start")
    ends = collections.Counter(line[1] for line in lines if line[0] == "end")
    assert set(ends) == set(enqueued), f"{len(set(enqueued) - set(ends))} jobs never ran"
    assert [j for j, n in ends.items() if n > 1] == [], "a job completed twice"
    assert [j for j, n in starts.items() if n > 1] == [], "a job started twice"
