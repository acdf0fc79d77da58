"""Failure signatures end to end, with a real worker: one bug is one signature whatever ids its messages
carry, two bugs are two, and a signature marked non-retryable sends new failures straight to dead."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.core.retry import RetryPolicy
from jobengine.core.signatures import SignatureFilter, SignatureStatus
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.worker import JobContext

from .conftest import settings_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["sqlite", "postgres"])
async def live(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    settings = settings_for(request.param, request, tmp_path, poll_interval=0.05)
    async with Engine.from_settings(settings) as engine:
        yield engine


def load_order(order_id: str) -> None:
    raise KeyError(f"order {order_id} not found in shard 0x{uuid.uuid4().hex[:8]}")


def parse_date(text: str) -> None:
    raise ValueError(f"bad date {text!r} at line {len(text) * 7}")


async def run_until_done(engine: Engine, ids: list[str], timeout: float = 60) -> None:
    worker = engine.worker(concurrency=20, poll_interval=0.05, heartbeat_every=1.0)
    task = asyncio.create_task(worker.run())
    try:
        for job_id in ids:
            await engine.wait_for(job_id, timeout=timeout)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def test_a_hundred_failures_of_one_bug_are_one_signature_two_bugs_two(live: Engine) -> None:
    """Acceptance: 100 failures of the same bug with different ids in the message give one signature with
    100 occurrences; a second bug gives a second signature."""

    @live.task(max_attempts=1)
    async def import_order(ctx: JobContext) -> None:
        load_order(ctx.payload["order"])

    @live.task(max_attempts=1)
    async def import_date(ctx: JobContext) -> None:
        parse_date(ctx.payload["date"])

    jobs = [live.new_job("import_order", {"order": str(uuid.uuid4())}) for _ in range(100)]
    jobs += [live.new_job("import_date", {"date": f"2024-13-{d:02}"}) for d in range(1, 8)]
    stored = await live.enqueue_many(jobs)
    await run_until_done(live, [j.id for j in stored])
    signatures = await live.signatures.list(SignatureFilter(tenant="default"))
    assert sorted((s.error_type, s.occurrences) for s in signatures) == [("KeyError", 100), ("ValueError", 7)]
    bug = next(s for s in signatures if s.error_type == "KeyError")
    assert bug.message == "'order <uuid> not found in shard <hex>'"
    assert bug.frames[:2] == ("test_signatures.py:load_order", "test_signatures.py:import_order")
    assert bug.task == "import_order" and len(bug.sample_job_ids) == 10 and bug.status is SignatureStatus.ACTIVE
    assert set(bug.sample_job_ids) <= {j.id for j in stored}


async def test_a_non_retryable_signature_sends_new_failures_to_dead(live: Engine) -> None:
    @live.task(max_attempts=5, retry=RetryPolicy(base=0.01, cap=0.01))
    async def flaky_import(ctx: JobContext) -> None:
        load_order(ctx.payload["order"])

    first = await live.enqueue("flaky_import", {"order": str(uuid.uuid4())}, max_attempts=1)
    await run_until_done(live, [first.id])
    (signature,) = await live.signatures.list()
    marked = await live.signatures.update(signature.key, non_retryable=True, actor="alice")
    assert marked.non_retryable
    job = await live.enqueue("flaky_import", {"order": str(uuid.uuid4())})
    await run_until_done(live, [job.id])
    done = await live.get_job(job.id)
    assert (done.state, done.attempt) == (JobState.DEAD, 1)  # 4 attempts were left: none was used
    assert (await live.signatures.get(signature.key)).occurrences == 2
    audit = [e for e in await live.events(limit=10_000) if e.type == "signature.updated"]
    assert [(e.data["actor"], e.data["non_retryable"]) for e in audit] == [("alice", True)]
    # Marked retryable again, failures retry as usual.
    await live.signatures.update(signature.key, non_retryable=False, actor="alice")
    again = await live.enqueue("flaky_import", {"order": str(uuid.uuid4())}, max_attempts=3)
    await run_until_done(live, [again.id])
    assert (await live.get_job(again.id)).attempt == 3
