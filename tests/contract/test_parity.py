"""Every backend, driven through the same random sequence of operations, ends every step in the same
state as the oracle (``oracle.py``), which applies ``core/transitions.py`` directly: the reference.

Compared after every step: each call's result (jobs and events, in order), every job field, the whole
event log with its ids, counts, next_run_at and expired leases. Normalised away: lease tokens (random)
and the order of expired_jobs (unspecified). Events are in causal order on every backend: a job's own
event, then those of the dependents it released or cancelled.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import (
    AttemptError,
    Changed,
    Completion,
    Event,
    FailOutcome,
    Failure,
    Job,
    JobFilter,
    Lease,
    NewJob,
    Phase,
    PhaseState,
    PhaseUpdate,
)
from jobengine.ports.store import Store

from .conftest import BACKENDS
from .helpers import T0
from .oracle import Oracle

QUEUES = ("a", "b")


def _job(job: Job) -> Job:
    return replace(job, lease_token=LeaseToken("held") if job.lease_token else None)


def _event(event: Event) -> tuple[Any, ...]:
    return (event.id, event.at, event.type, event.tenant, event.job_id, event.queue, event.task, dict(event.data))


def _changed(changed: Changed) -> tuple[list[Job], list[tuple[Any, ...]]]:
    return [_job(j) for j in changed.jobs], [_event(e) for e in changed.events]


class Driver:
    """Chooses each operation from the reference store's state, then applies it to every store."""

    def __init__(self, stores: dict[str, Store | Oracle], seed: int) -> None:
        self.stores = stores
        self.rng = random.Random(seed)
        self.now = T0
        self.tokens: dict[str, dict[JobId, LeaseToken]] = {name: {} for name in stores}

    async def same(self, label: str, call: Any) -> list[Any]:
        results = {name: await call(name, store) for name, store in self.stores.items()}
        reference = results.pop("oracle")
        for name, result in results.items():
            assert result == reference, f"{name} differs from the oracle after {label}"
        return [reference]

    async def snapshot(self) -> None:
        async def state(name: str, store: Store) -> Any:
            jobs = [_job(j) for j in await store.list_jobs(JobFilter(limit=10_000))]
            events = [_event(e) for e in await store.list_events(0, 100_000)]
            counts = await store.count_jobs(), await store.count_jobs(finished=False)
            nxt = {q: await store.next_run_at([q]) for q in QUEUES}
            expired = sorted(j.id for j in await store.expired_jobs(self.now, 1000))
            return jobs, events, counts, nxt, expired

        await self.same("snapshot", state)

    async def reference_jobs(self) -> list[Job]:
        return await self.stores["oracle"].list_jobs(JobFilter(limit=10_000))

    async def step(self) -> str:
        rng = self.rng
        jobs = await self.reference_jobs()
        ids = [j.id for j in jobs]
        running = [j for j in jobs if j.state.value == "running"]
        op = rng.choice(["insert", "insert", "fetch", "fetch", "complete", "fail", "release", "heartbeat",
                         "phases", "cancel", "retry", "prune", "tick"])  # fmt: skip

        if op == "insert":
            batch: list[NewJob] = []
            for _ in range(rng.randint(1, 6)):
                known = ids + [n.id for n in batch]
                deps = tuple(rng.sample(known, k=min(len(known), rng.choice([0, 0, 1, 2]))))
                batch.append(
                    NewJob(
                        task=rng.choice(["x", "y"]),
                        queue=rng.choice(QUEUES),
                        payload={"v": rng.randint(0, 2)},
                        priority=rng.randint(-1, 2),
                        run_at=self.now + rng.choice([-5, 0, 0, 3, 20]),
                        max_attempts=rng.randint(1, 3),
                        idempotency_key=rng.choice([None] * 6 + ["k1", "k2"]),
                        depends_on=deps,
                    )
                )
            names = [tuple(rng.sample(["p1", "p2", "p3"], k=rng.randint(0, 2))) for _ in batch]

            async def insert(name: str, store: Store) -> Any:
                try:
                    inserted = await store.insert_jobs(batch, self.now, names)
                except Exception as exc:  # the same error, on every store
                    return type(exc).__name__
                return [_job(j) for j in inserted.jobs], inserted.created, [_event(e) for e in inserted.events]

            await self.same(op, insert)
        elif op == "fetch":
            queues = rng.sample(QUEUES, k=rng.randint(1, 2))
            limit = rng.randint(1, 4)

            async def fetch(name: str, store: Store) -> Any:
                changed = await store.fetch_jobs(queues, limit, WorkerId("w"), 10.0, self.now)
                self.tokens[name].update((j.id, LeaseToken(j.lease_token or "")) for j in changed.jobs)
                return _changed(changed)

            await self.same(op, fetch)
        elif op in ("complete", "fail", "release", "heartbeat", "phases") and running:
            chosen = rng.sample(running, k=rng.randint(1, len(running)))
            stale = rng.random() < 0.2  # sometimes a token that lost its lease
            outcomes = [FailOutcome.RETRY, FailOutcome.RETRY, FailOutcome.DEAD, FailOutcome.CANCELLED]
            plan = [(rng.choice(outcomes), rng.random() < 0.25) for _ in chosen]

            def lease_of(name: str, job: Job) -> LeaseToken:
                return LeaseToken("0" * 24) if stale else self.tokens[name][job.id]

            async def fenced(name: str, store: Store) -> Any:
                if op == "complete":
                    return _changed(
                        await store.complete_jobs(
                            [Completion(j.id, lease_of(name, j), {"r": j.attempt}) for j in chosen], self.now
                        )
                    )
                if op == "fail":
                    failures = [
                        Failure(
                            j.id,
                            lease_of(name, j),
                            AttemptError(j.attempt, self.now, "E", f"err {j.attempt}"),
                            outcome,
                            retry_at=self.now + 2,
                            only_if_expired_at=self.now if rescue else None,
                        )
                        for j, (outcome, rescue) in zip(chosen, plan, strict=True)
                    ]
                    return _changed(await store.fail_jobs(failures, self.now))
                if op == "release":
                    return _changed(
                        await store.release_jobs([Lease(j.id, lease_of(name, j)) for j in chosen], self.now)
                    )
                if op == "heartbeat":
                    leases = [Lease(j.id, lease_of(name, j)) for j in chosen]
                    return await store.heartbeat_jobs(leases, self.now + 10, self.now)
                updates = [
                    PhaseUpdate(
                        j.id,
                        lease_of(name, j),
                        tuple(
                            Phase(p.name, rng_state, 0.5, checkpoint={"at": self.now})
                            for p, rng_state in zip(j.phases, [PhaseState.SUCCEEDED, PhaseState.RUNNING], strict=False)
                        ),
                        event="phase.progress",
                    )
                    for j in chosen
                ]
                return _changed(await store.save_phases(updates, self.now))

            await self.same(op, fenced)
        elif op in ("cancel", "retry") and ids:
            chosen_ids = rng.sample(ids, k=rng.randint(1, min(4, len(ids))))

            async def operator(name: str, store: Store) -> Any:
                if op == "cancel":
                    return _changed(await store.cancel_jobs(chosen_ids, "op", self.now))
                return _changed(await store.retry_jobs(chosen_ids, self.now))

            await self.same(op, operator)
        elif op == "prune":
            # Never deletes (the oracle keeps a deleted dependency's dependents blocked), and a
            # limit large enough that which candidates come first does not matter.
            async def prune(name: str, store: Store) -> Any:
                pruned = await store.prune_jobs(self.now - 5, T0 - 1000, self.now, 10_000)
                return pruned.staled, pruned.deleted, [_event(e) for e in pruned.events]

            await self.same(op, prune)
        else:
            self.now += rng.choice([1, 2, 5, 11])
        return op


@pytest.fixture(params=list(BACKENDS))
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Store | Oracle]]:
    """The oracle and one backend, side by side."""
    async with BACKENDS[request.param](request) as store:
        yield {"oracle": Oracle(), request.param: store}


@pytest.mark.parametrize("seed", range(10))
async def test_random_operations_leave_every_backend_where_the_oracle_is(
    stores: dict[str, Store | Oracle], seed: int
) -> None:
    driver = Driver(stores, seed)
    done = []
    for _ in range(80):
        done.append(await driver.step())
        await driver.snapshot()
    assert {"insert", "fetch"} <= set(done)
