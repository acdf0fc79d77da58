"""5,000 jobs through a 3-node NATS JetStream cluster, its stream's leader SIGKILLed mid-run and restarted.

The cluster is the test's own (tests/support/nats_cluster.py); the queue's streams have 3 replicas and every
process is given all three nodes' URLs. Two ``jobengine worker`` processes run the jobs (PostgreSQL store);
the test process enqueues them in batches, so publishes go on through the failover too. When 1,500 jobs have
run, the node leading the runner stream is killed with SIGKILL; it is started again once another node has
taken over the stream. An outside ledger (tests/support/fleet_app.py: one line per start and end, written by
the job itself) then shows every job run to its end exactly once: 0 lost, 0 completed twice.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.fleet import APP, ROOT
from support.nats_cluster import NatsCluster, nats_cluster
from support.processes import Processes
from support.services import unique_name

N = 5_000
BATCH = 250
KILL_AFTER = 1_500
HOLD = 3_000  # enqueued before the kill; jobs are queued and running when it comes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def cluster_yaml(url: str, name: str) -> str:
    up = name.upper().replace("-", "_")
    return f"""queue:
  kind: nats
  nats:
    url: "{url}"
    replicas: 3
    planner: {{stream: P_{up}, subject: {name}.planner, durableConsumer: {name}-planners,
              deadLetterStream: P_{up}_DEAD, deadLetterSubject: {name}.planner.dead}}
    runner: {{stream: R_{up}, subject: {name}.runner, durableConsumer: {name}-runners,
             deadLetterStream: R_{up}_DEAD, deadLetterSubject: {name}.runner.dead}}
"""


def ledger(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


async def wait_until(check: Callable[[], object], ceiling: float, what: str) -> None:
    deadline = time.monotonic() + ceiling
    while not check():
        assert time.monotonic() < deadline, f"timed out after {ceiling:g}s waiting for {what}"
        await asyncio.sleep(0.1)


async def test_a_killed_cluster_node_loses_no_job_and_completes_none_twice(tmp_path: Path, postgres_dsn: str) -> None:
    name = unique_name("clu").replace("_", "-")
    stream = f"R_{name.upper().replace('-', '_')}"
    with nats_cluster(tmp_path / "nats") as cluster:
        (tmp_path / "jobengine.yaml").write_text(cluster_yaml(cluster.url, name))
        # A lease of 10 s: deliveries and acks lost with the killed node come back after it (NATS AckWait).
        env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBENGINE_DATABASE": postgres_dsn,
               "LEDGER": str(tmp_path / "ledger.txt"), "JOBENGINE_POLL_INTERVAL": "0.2",
               "JOBENGINE_LEASE_SECONDS": "10", "JOBENGINE_HEARTBEAT_INTERVAL": "2", "FLEET_TASKS": "a"}  # fmt: skip
        procs = Processes(tmp_path, env, tmp_path)
        settings = Settings.load(tmp_path / "jobengine.yaml", env)
        assert settings.queue.nats.replicas == 3 and len(settings.queue.nats.servers) == 3
        try:
            await run(cluster, procs, settings, stream, tmp_path / "ledger.txt")
        finally:
            procs.stop_all()


async def run(cluster: NatsCluster, procs: Processes, settings: Settings, stream: str, ledger_path: Path) -> None:
    consumer = settings.queue.nats.runner.durable_consumer
    engine = Engine.from_settings(settings)
    async with engine:
        workers = [procs.spawn(f"worker{i}", "worker", "--app", APP, "--concurrency", "50") for i in range(2)]
        for w in workers:
            procs.wait_output(w, "started on queues", 120)  # their transports have declared the streams
        # The node to kill leads the runner stream and its consumer (where messages are stored and handed
        # out) and holds the most of this run's connections (workers', and the relay's here): they must
        # reconnect elsewhere.
        busiest = await asyncio.to_thread(cluster.clients, "jobengine-runner")
        target = await cluster.colocate_leaders(stream, consumer, max(busiest, key=lambda n: busiest[n]))
        enqueued: list[str] = []
        killed: dict[str, object] = {}
        down = asyncio.Event()

        def ends() -> int:
            return sum(1 for line in ledger(ledger_path) if line[0] == "end")

        async def produce() -> None:
            for start in range(0, N, BATCH):
                if start == HOLD:
                    await down.wait()  # the rest is enqueued while the node is down and after
                jobs = await engine.enqueue_many([engine.new_job("a", {"i": i}) for i in range(start, start + BATCH)])
                enqueued.extend(j.id for j in jobs)  # the enqueue returned: these must run
                await asyncio.sleep(0.05 if start < HOLD else 0.2)

        async def chaos() -> None:
            await wait_until(lambda: ends() >= KILL_AFTER, 120, f"{KILL_AFTER} jobs to run")
            leader = await cluster.colocate_leaders(stream, consumer, target)  # still there, as a rule
            killed.update(node=leader, at=ends(), clients=busiest[leader])
            cluster.kill(leader)
            down.set()
            began = time.monotonic()
            await wait_until(
                lambda: (
                    cluster.consumer_leader(stream, consumer) not in (None, leader)
                    and cluster.stream_leader(stream) not in (None, leader)
                ),
                60,
                "other nodes to take over the stream and its consumer",
            )
            killed["failover"] = round(time.monotonic() - began, 1)
            await asyncio.to_thread(cluster.restart, leader)

        await asyncio.wait_for(asyncio.gather(produce(), chaos()), 180)
        restarted = time.monotonic()

        async def succeeded() -> int:
            counts = await engine.count_jobs()
            return sum(n for (_, state), n in counts.items() if state is JobState.SUCCEEDED)

        deadline = time.monotonic() + 120
        while (done := await succeeded()) < N:
            assert time.monotonic() < deadline, f"{done} of {N} jobs succeeded; {ends()} ends in the ledger"
            await asyncio.sleep(0.2)
        print(f"killed {killed}; every job succeeded {time.monotonic() - restarted:.1f}s after the restart")
        finals = await engine.store.get_jobs(enqueued)
        # Nothing is stuck in the cluster either: messages whose acks died with the node come back after
        # their lease (10 s), find their jobs finished and are acknowledged.
        deadline = time.monotonic() + 90
        while (depth := await engine.transports.runner.depth()) != 0:
            assert time.monotonic() < deadline, f"{depth} messages still in the runner stream"
            await asyncio.sleep(0.5)
        print(f"the runner stream emptied {time.monotonic() - restarted:.1f}s after the restart")
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(60) == 0, procs.output(w)

    assert len(enqueued) == N
    assert KILL_AFTER <= killed["at"] < N, killed  # type: ignore[operator]  # the node died mid-run
    assert killed["clients"], killed  # and clients of the run were connected to it
    lines = ledger(ledger_path)
    ended = collections.Counter(line[1] for line in lines if line[0] == "end")
    started = collections.Counter(line[1] for line in lines if line[0] == "start")
    lost = set(enqueued) - set(ended)
    twice = {job: n for job, n in ended.items() if n > 1}
    assert not lost, f"{len(lost)} jobs never ran to their end"
    assert not twice, f"{len(twice)} jobs completed more than once"
    assert set(ended) == set(enqueued)
    assert set(started.values()) == {1}, "a job started twice"
    assert {j.state for j in finals} == {JobState.SUCCEEDED}
    assert [j.id for j in finals if j.attempt != 1] == [], "a job spent a second attempt"
