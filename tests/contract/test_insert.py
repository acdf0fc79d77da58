"""insert_jobs and get_jobs: every field round-trips, batches, idempotency keys."""

from __future__ import annotations

import pytest

from jobengine.core import events as ev
from jobengine.core.ids import JobId
from jobengine.core.models import Job, NewJob, Phase, PhaseState, PhaseUpdate
from jobengine.core.states import JobState
from jobengine.errors import IdempotencyConflict, InvalidJob
from jobengine.ports.store import Store

from .helpers import T0, all_events, claim, completion, enqueue, failure, get, run_to_success, token


async def test_insert_returns_the_job_and_get_returns_it_field_for_field(store: Store) -> None:
    (dep,) = await enqueue(store, NewJob(task="dep.task", queue="q1", tenant="acme"))
    await run_to_success(store, dep, T0)
    new = NewJob(
        task="mail.send",
        payload={"to": ["a@example.com"], "n": 3, "nested": {"ok": True, "ratio": 0.5, "none": None}},
        queue="q1",
        priority=7,
        run_at=T0 + 60,
        max_attempts=5,
        idempotency_key="key-1",
        depends_on=(dep.id,),
        tenant="acme",
        timeout=12.5,
        id=JobId("0190f2c4-0000-7000-8000-000000000001"),
    )
    inserted = await store.insert_jobs([new], T0 + 1, [("render", "send")])
    (job,) = inserted.jobs
    assert inserted.created == [True]
    assert job == Job(
        id=new.id,
        tenant="acme",
        queue="q1",
        task="mail.send",
        payload={"to": ["a@example.com"], "n": 3, "nested": {"ok": True, "ratio": 0.5, "none": None}},
        priority=7,
        run_at=T0 + 60,
        state=JobState.SCHEDULED,
        attempt=0,
        max_attempts=5,
        created_at=T0 + 1,
        updated_at=T0 + 1,
        idempotency_key="key-1",
        depends_on=(dep.id,),
        timeout=12.5,
        phases=(Phase("render"), Phase("send")),
    )
    assert await store.get_jobs([job.id]) == [job]


TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
async def test_a_jobs_trace_context_is_stored_and_claimed_with_it(store: Store, keyed: bool) -> None:
    """The traceparent a job was enqueued under comes back on insert, on read and on the claim a worker
    makes, on the store's single-job and batch paths alike."""
    key = "k" if keyed else None
    (job,) = await enqueue(store, NewJob(task="t", trace=TRACE, idempotency_key=key))
    (other, untraced) = await enqueue(store, NewJob(task="t", trace=TRACE), NewJob(task="t"))
    assert job.trace == other.trace == TRACE
    assert untraced.trace is None
    assert (await get(store, job.id)).trace == TRACE
    claimed = {j.id: j for j in await claim(store, T0, limit=3)}
    assert claimed[job.id].trace == claimed[other.id].trace == TRACE
    assert claimed[untraced.id].trace is None


async def test_every_field_written_by_a_transition_reads_back_the_same(store: Store) -> None:
    """After each transition, get_jobs returns exactly the job the transition returned."""
    (job,) = await enqueue(store, NewJob(task="t", payload=[1, "two"], timeout=3.0), phases=[("a", "b")])
    assert await get(store, job.id) == job

    (running,) = await claim(store, T0 + 1)
    assert await get(store, job.id) == running
    assert running.lease_worker == "w1" and running.lease_expires_at == T0 + 31 and running.started_at == T0 + 1

    phases = (
        Phase("a", PhaseState.SUCCEEDED, 1.0, result={"rows": 10}, started_at=T0 + 1, finished_at=T0 + 2),
        Phase("b", PhaseState.RUNNING, 0.25, checkpoint={"cursor": "x"}, message="halfway", started_at=T0 + 2),
    )
    saved = await store.save_phases([PhaseUpdate(job.id, token(running), phases)], T0 + 2)
    assert saved.jobs[0].phases == phases
    assert saved.jobs[0].progress == pytest.approx(0.625)
    assert await get(store, job.id) == saved.jobs[0]

    failed = await store.fail_jobs([failure(running, T0 + 3, retry_at=T0 + 5)], T0 + 3)
    assert await get(store, job.id) == failed.jobs[0]

    (again,) = await claim(store, T0 + 5)
    assert again.phases[1].state is PhaseState.PENDING and again.phases[1].checkpoint == {"cursor": "x"}
    assert await get(store, job.id) == again

    done = await store.complete_jobs([completion(again, {"sent": True, "ids": [1, 2]})], T0 + 6)
    assert done.jobs[0].result == {"sent": True, "ids": [1, 2]}
    assert await get(store, job.id) == done.jobs[0]

    pruned = await store.prune_jobs(T0 + 7, T0 - 1, T0 + 7, 10)
    assert pruned.staled == 1
    stale = await get(store, job.id)
    assert stale.state is JobState.STALE and stale.outcome is JobState.SUCCEEDED
    assert stale.errors == done.jobs[0].errors and stale.result == done.jobs[0].result


async def test_defaults_run_at_is_now_and_the_job_is_queued(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t"), now=T0 + 5)
    assert job.state is JobState.QUEUED
    assert job.run_at == T0 + 5
    assert (job.attempt, job.max_attempts, job.priority, job.tenant, job.queue) == (0, 3, 0, "default", "default")
    assert job.payload is None and job.result is None and job.phases == () and job.errors == ()
    assert (job.lease_worker, job.lease_token, job.lease_expires_at) == (None, None, None)
    assert job.cancel_requested is False and job.reason is None and job.outcome is None
    assert job.started_at is None and job.finished_at is None


async def test_run_at_in_the_past_is_queued_and_in_the_future_scheduled(store: Store) -> None:
    past, future = await enqueue(store, NewJob(task="t", run_at=T0 - 10), NewJob(task="t", run_at=T0 + 10))
    assert past.state is JobState.QUEUED and past.run_at == T0 - 10
    assert future.state is JobState.SCHEDULED and future.run_at == T0 + 10


async def test_payload_is_stored_as_json(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", payload={"tuple": (1, 2), "text": "héllo ✓"}))
    expected = {"tuple": [1, 2], "text": "héllo ✓"}
    assert job.payload == expected
    assert (await get(store, job.id)).payload == expected


async def test_a_batch_is_inserted_in_order_with_one_enqueued_event_each(store: Store) -> None:
    batch = [NewJob(task="t", payload={"i": i}, priority=i % 3) for i in range(250)]
    inserted = await store.insert_jobs(batch, T0, [()] * len(batch))
    assert [j.id for j in inserted.jobs] == [n.id for n in batch]
    assert inserted.created == [True] * 250
    assert [e.job_id for e in inserted.events] == [n.id for n in batch]
    assert {e.type for e in inserted.events} == {ev.ENQUEUED}
    assert inserted.events[7].data == {"state": "queued", "attempt": 0, "priority": 7 % 3}
    assert await store.get_jobs([n.id for n in batch]) == inserted.jobs
    assert await store.count_jobs() == {("default", JobState.QUEUED): 250}


async def test_empty_batch_inserts_nothing(store: Store) -> None:
    inserted = await store.insert_jobs([], T0, [])
    assert (inserted.jobs, inserted.created, inserted.events) == ([], [], [])


async def test_phases_are_created_pending_from_the_task_names(store: Store) -> None:
    a, b = await enqueue(store, NewJob(task="t"), NewJob(task="u"), phases=[("one", "two", "three"), ()])
    assert [p.name for p in a.phases] == ["one", "two", "three"]
    assert all(p.state is PhaseState.PENDING and p.progress == 0.0 for p in a.phases)
    assert b.phases == ()


# -- idempotency ----------------------------------------------------------------------------------------


async def test_same_key_and_request_returns_the_existing_job(store: Store) -> None:
    (first,) = await enqueue(store, NewJob(task="t", payload={"a": 1, "b": 2}, idempotency_key="k"))
    events_before = await all_events(store)
    again = await store.insert_jobs([NewJob(task="t", payload={"b": 2, "a": 1}, idempotency_key="k")], T0 + 1, [()])
    assert again.created == [False]
    assert again.jobs == [first]
    assert again.events == []
    assert await all_events(store) == events_before
    assert await store.count_jobs() == {("default", JobState.QUEUED): 1}


async def test_same_key_returns_the_job_as_it_now_is(store: Store) -> None:
    await enqueue(store, NewJob(task="t", idempotency_key="k"))
    (running,) = await claim(store, T0)
    again = await store.insert_jobs([NewJob(task="t", idempotency_key="k")], T0 + 1, [()])
    assert again.jobs == [running] and again.created == [False]


@pytest.mark.parametrize(
    "changed",
    [{"payload": {"a": 2}}, {"task": "other"}, {"queue": "other"}],
    ids=["payload", "task", "queue"],
)
async def test_same_key_with_a_different_request_conflicts_and_keeps_nothing(
    store: Store, changed: dict[str, object]
) -> None:
    (first,) = await enqueue(store, NewJob(task="t", payload={"a": 1}, idempotency_key="k"))
    events_before = await all_events(store)
    fresh = NewJob(task="t")
    fields: dict[str, object] = {"task": "t", "payload": {"a": 1}, "idempotency_key": "k", **changed}
    with pytest.raises(IdempotencyConflict) as info:
        await store.insert_jobs([fresh, NewJob(**fields)], T0 + 1, [(), ()])  # type: ignore[arg-type]
    assert info.value.existing_id == first.id and info.value.key == "k"
    assert await store.get_jobs([fresh.id]) == []
    assert await all_events(store) == events_before


async def test_keys_are_scoped_by_tenant(store: Store) -> None:
    a, b = await enqueue(
        store,
        NewJob(task="t", idempotency_key="k", tenant="a"),
        NewJob(task="t", idempotency_key="k", tenant="b", payload={"x": 1}),
    )
    assert a.id != b.id


async def test_same_key_twice_in_one_batch(store: Store) -> None:
    first, second = NewJob(task="t", idempotency_key="k"), NewJob(task="t", idempotency_key="k")
    inserted = await store.insert_jobs([first, second], T0, [(), ()])
    assert inserted.created == [True, False]
    assert inserted.jobs[0] == inserted.jobs[1] and inserted.jobs[0].id == first.id
    assert await store.get_jobs([second.id]) == []
    with pytest.raises(IdempotencyConflict):
        await store.insert_jobs(
            [NewJob(task="t", idempotency_key="j"), NewJob(task="t", idempotency_key="j", payload=1)], T0, [(), ()]
        )


async def test_a_key_is_free_again_once_its_job_is_deleted(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", idempotency_key="k"))
    await store.cancel_jobs([job.id], "no", T0)
    await store.prune_jobs(T0 + 1, T0 - 1, T0 + 1, 10)  # stale
    await store.prune_jobs(T0 + 2, T0 + 2, T0 + 2, 10)  # deleted
    inserted = await store.insert_jobs([NewJob(task="t", idempotency_key="k", payload=2)], T0 + 3, [()])
    assert inserted.created == [True] and inserted.jobs[0].id != job.id


async def test_an_id_already_in_use_is_refused_and_nothing_is_kept(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", payload={"v": 1}))
    fresh = NewJob(task="t")
    with pytest.raises(InvalidJob) as info:
        await store.insert_jobs([fresh, NewJob(task="t", payload={"v": 2}, id=job.id)], T0 + 1, [(), ()])
    assert info.value.field == "id"
    assert await store.get_jobs([fresh.id]) == []
    assert (await get(store, job.id)).payload == {"v": 1}
