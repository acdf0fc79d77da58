"""A graph run by worker processes that are SIGKILLed under it, on PostgreSQL.

The graph is ``head`` -> 100 ``leaf`` nodes -> ``fanin``. Two ``jobengine worker`` processes run it; every
2 s the older of them is SIGKILLed (once it has run jobs for 2 s and the other one runs too: on a busy
machine a worker takes longer than that to start) and a new one started in its place, ``KILLS`` times or
until the graph ended; then the two left finish it. The test is bounded by the work, not by a deadline:
it fails when no node ends for ``STALL`` seconds.

The graph succeeds and the fan-in receives all 100 leaves' results. An outside ledger written by the task
code (tests/support/graph_app.py) shows that each node's successful attempt ran to its end once (any other
run that reached its end was in a process killed before it could commit), that no two runs of a node
overlapped, and that the fan-in succeeded once, after every leaf had succeeded.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import subprocess
import time
from pathlib import Path

import pytest

from jobengine.core.graphs import GraphState
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.canvas import chain, chord
from jobengine.settings import Settings
from support.graph_app import register
from support.processes import Processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.support.graph_app:app"
LEAVES = 100
LEAF_SLEEP = 1.0  # long enough that kills land mid-leaf, short enough that the graph ends in seconds
KILL_EVERY = 2.0
KILLS = 6  # then the chaos stops and the two workers left finish the graph
STALL = 120.0  # seconds without a node ending: the workers are stuck (a busy machine needs far less)


def _ledger(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_fan_out_fan_in_graph_survives_a_worker_killed_every_two_seconds(
    postgres_dsn: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JOBENGINE_DATABASE": postgres_dsn,
        "LEDGER": str(ledger),
        "JOBENGINE_WORKER_CONCURRENCY": "5",
        "JOBENGINE_POLL_INTERVAL": "0.2",
    }
    procs = Processes(tmp_path, env, ROOT)
    kills: dict[int, float] = {}  # pid -> when it was killed

    def start() -> subprocess.Popen[bytes]:
        return procs.spawn(f"worker{len(procs.procs)}", "worker", "--app", APP)

    try:
        async with Engine.from_settings(Settings(database=postgres_dsn)) as engine:
            t = register(engine)
            graph = chain(
                t["head"].s(),
                chord([t["leaf"].s(i=i, sleep=LEAF_SLEEP) for i in range(LEAVES)], t["fanin"].s()),
                name="kill",
            )
            handle = await engine.graphs.submit(graph)
            workers = [start(), start()]
            ready_at: dict[int, float] = {}  # pid -> when it was first seen running
            status = await handle.status()
            progress_at, done, last_kill, read_at = time.monotonic(), status.done, time.monotonic(), 0.0
            while not status.ended:
                await asyncio.sleep(0.1)
                now = time.monotonic()
                for w in workers:
                    if w.pid not in ready_at and "started on queues" in procs.output(w):
                        ready_at[w.pid] = now
                    assert w.poll() is None, procs.output(w)
                if now - read_at >= 1.0:
                    status, read_at = await handle.status(), now
                    if status.done != done:
                        progress_at, done = now, status.done
                    assert now - progress_at < STALL, f"no node ended for {STALL:g}s: {status}"
                victim = workers[len(kills) % 2]  # each in turn: the one that has lived longer
                # Killed once it has run jobs for a while and the other runs too: a worker killed as it
                # starts up tests nothing, and on a busy machine starting up takes longer than 2 s.
                others_ready = all(w.pid in ready_at for w in workers)
                if (
                    len(kills) < KILLS
                    and others_ready
                    and now - last_kill >= KILL_EVERY
                    and now - ready_at[victim.pid] >= KILL_EVERY
                ):
                    procs.kill(victim)
                    kills[victim.pid], last_kill = time.time(), now
                    workers[workers.index(victim)] = start()
            status = await handle.wait(60)
            nodes = {n.name: n for n in (await handle.status(nodes=True)).nodes}
            results = await handle.results()
            succeeded: collections.Counter[str] = collections.Counter()
            after = 0
            while batch := await engine.events(after_id=after, limit=5000):
                succeeded.update(e.job_id for e in batch if e.type == "job.succeeded" and e.job_id)
                after = batch[-1].id
    finally:
        procs.stop_all()

    assert status.state is GraphState.SUCCEEDED, status
    assert (status.done, status.total) == (LEAVES + 2, LEAVES + 2)
    assert len(kills) >= 2, f"only {len(kills)} kills: the graph ended too soon to test anything"
    assert {n.job.state for n in nodes.values()} == {JobState.SUCCEEDED}
    assert set(succeeded.values()) == {1} and set(succeeded) == {n.job.id for n in nodes.values()}
    expected_sum = sum(1000 + i for i in range(LEAVES))
    assert results[next(name for name in nodes if nodes[name].job.task == "fanin")] == expected_sum

    # The ledger, kept outside the engine. Each execution is (job, attempt); an execution without an end
    # line was killed (its process must be one the test killed).
    lines = _ledger(ledger)
    started = collections.Counter((line[1], line[3]) for line in lines if line[0] == "start")
    assert set(started.values()) == {1}, "one attempt of a node started twice"
    starts = {
        (job, attempt): (node, pid, float(at)) for kind, job, node, attempt, pid, at, *_ in lines if kind == "start"
    }
    ends: dict[tuple[str, str], list[tuple[float, str]]] = collections.defaultdict(list)
    for kind, job, _node, attempt, _pid, at, *value in lines:
        if kind == "end":
            ends[(job, attempt)].append((float(at), value[0]))
    assert all(len(v) == 1 for v in ends.values()), "one attempt of a node ended twice"
    interrupted = [key for key in starts if key not in ends]
    assert interrupted, "no kill landed while a worker ran a node"
    for key in interrupted:
        assert int(starts[key][1]) in kills, f"execution {key} never ended though its process was not killed"
    by_job = {n.job.id: n for n in nodes.values()}
    for job_id, node in by_job.items():
        # The attempt the store recorded as the success ran to its end exactly once, in the ledger.
        assert (job_id, str(node.job.attempt)) in ends, f"{node.name}: its success is not in the ledger"
        for (job, attempt), (_, pid, _) in starts.items():
            if job == job_id and attempt != str(node.job.attempt) and (job, attempt) in ends:
                # Ran to its end but did not count: only a kill between the end and the commit does that.
                assert int(pid) in kills, f"{node.name}: attempt {attempt} ended in a live worker, did not succeed"
        spans = sorted(
            (began, ends[(job, attempt)][0][0] if (job, attempt) in ends else kills[int(pid)])
            for (job, attempt), (_, pid, began) in starts.items()
            if job == job_id
        )
        for (_, e1), (b2, _) in itertools.pairwise(spans):
            assert b2 >= e1, f"two executions of {node.name} overlapped"
    fanin = next(n for n in nodes.values() if n.job.task == "fanin")
    fanin_ends = [v for (job, _), vs in ends.items() if job == fanin.job.id for v in vs]
    # Every execution of the fan-in that reached its end saw all 100 results; the one that succeeded ran once.
    assert {value for _, value in fanin_ends} == {f"{LEAVES}:{expected_sum}"}
    assert len(ends[(fanin.job.id, str(fanin.job.attempt))]) == 1
    last_leaf = max(ends[(n.job.id, str(n.job.attempt))][0][0] for n in nodes.values() if n.job.task == "leaf")
    assert min(at for (job, _), (_, _, at) in starts.items() if job == fanin.job.id) >= last_leaf
    print(
        f"\ngraph kill: {len(kills)} workers SIGKILLed, {len(interrupted)} executions killed mid-node, "
        f"{len(starts)} executions of {len(nodes)} nodes; the fan-in ran {len(fanin_ends)} time(s) to its end"
    )
