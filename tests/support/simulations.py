"""The run and simulation the simulate tests share (``scheduler/test_run_simulate`` on a task in code,
``test_pack_simulation`` on a pack version awaiting approval): a full run over 1,000 items in segments of
100, then a simulation of a new version that changes the result of every hundredth item (``i * 2`` becomes
``i * 2 + 1``), and the diff between them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from jobengine.core.run_diff import ItemChange, RunDiff
from jobengine.core.run_requests import RunMode, RunRequest
from jobengine.core.runs import Run
from jobengine.engine import Engine

ITEMS: Final = tuple(range(1000))
SEGMENT: Final = 100
#: The items whose result the new version changes.
CHANGED: Final = list(range(0, 1000, 100))


def full_request(task: str, **fields: object) -> RunRequest:
    """The full run over :data:`ITEMS` (``fields``: the rest of the request)."""
    return RunRequest(task=task, items=ITEMS, segment_size=SEGMENT, **fields)  # type: ignore[arg-type]


def simulate_request(task: str, **fields: object) -> RunRequest:
    """The simulation of the new version over the same items."""
    return full_request(task, mode=RunMode.SIMULATE, **fields)


async def run_to_end(engine: Engine, run: Run, *, queues: Sequence[str] = ()) -> Run:
    """Run a worker (of ``queues``; none: the settings') until ``run`` ended; the run then."""
    chosen = {"queues": tuple(queues)} if queues else {}
    worker = engine.worker(**chosen, concurrency=4, poll_interval=0.05, heartbeat_every=1.0)
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(60):
            while not (run := await engine.runs.get(run.id)).ended:  # noqa: ASYNC110 (polling the store)
                await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)
    return run


def check_diff(diff: RunDiff, base: Run) -> None:
    """The simulation's diff against the full run ``base``: exactly the :data:`CHANGED` items changed."""
    assert diff.base_run_id == base.id and diff.unfinished == 0
    assert diff.counts == {"same": 990, "changed": 10, "new": 0, "gone": 0}
    changed = [e for e in diff.entries if e.change is ItemChange.CHANGED]
    assert [e.item for e in changed] == CHANGED
    assert [(e.before, e.after) for e in changed[:2]] == [(0, 1), (200, 201)]
