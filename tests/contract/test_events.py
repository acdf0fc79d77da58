"""The event log: one event per change, numbered monotonically, listable by cursor, job and tenant."""

from __future__ import annotations

from jobengine.core import events as ev
from jobengine.core.models import FailOutcome, Lease, NewJob, Phase, PhaseState, PhaseUpdate
from jobengine.core.states import JobState
from jobengine.ports.store import Store

from .helpers import T0, all_events, claim, completion, enqueue, event_types, failure, token


async def test_each_transition_appends_its_event_type(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t", max_attempts=3), phases=[("p",)])
    (r1,) = await claim(store, T0)
    await store.save_phases(
        [PhaseUpdate(job.id, token(r1), (Phase("p", PhaseState.RUNNING),), event="phase.started")], T0 + 1
    )
    await store.release_jobs([Lease(job.id, token(r1))], T0 + 2)
    (r2,) = await claim(store, T0 + 3)
    await store.cancel_jobs([job.id], "asked", T0 + 4)
    await store.fail_jobs([failure(r2, T0 + 5, retry_at=T0 + 6)], T0 + 5)
    (r3,) = await claim(store, T0 + 6)
    await store.fail_jobs([failure(r3, T0 + 7, FailOutcome.DEAD)], T0 + 7)
    await store.retry_jobs([job.id], T0 + 8)
    (r4,) = await claim(store, T0 + 9)
    await store.complete_jobs([completion(r4)], T0 + 10)
    await store.prune_jobs(T0 + 11, T0 - 1, T0 + 11, 10)
    await store.prune_jobs(T0 + 12, T0 + 12, T0 + 12, 10)
    assert await event_types(store, job.id) == [
        ev.ENQUEUED,
        ev.STARTED,
        ev.PHASE,
        ev.RELEASED,
        ev.STARTED,
        ev.CANCEL_REQUESTED,
        ev.FAILED,
        ev.STARTED,
        ev.DEAD,
        ev.RETRIED,
        ev.STARTED,
        ev.SUCCEEDED,
        ev.STALE,
        ev.DELETED,
    ]
    events = await store.list_events(0, 100, job_id=job.id)
    assert [e.at for e in events] == [T0, *(T0 + i for i in range(13))]
    assert [e.data["attempt"] for e in events] == [0, 1, 1, 0, 1, 1, 1, 2, 2, 0, 1, 1, 1, 1]
    assert all((e.tenant, e.queue, e.task, e.job_id) == ("default", "default", "t", job.id) for e in events)


async def test_event_ids_increase_and_match_what_transitions_returned(store: Store) -> None:
    inserted = await store.insert_jobs([NewJob(task="a"), NewJob(task="b")], T0, [(), ()])
    fetched = await store.fetch_jobs(["default"], 10, "w", 30.0, T0 + 1)  # type: ignore[arg-type]
    done = await store.complete_jobs([completion(j) for j in fetched.jobs], T0 + 2)
    returned = inserted.events + fetched.events + done.events
    ids = [e.id for e in returned]
    assert ids == sorted(ids) and len(set(ids)) == 6 and ids[0] >= 1
    assert await all_events(store) == returned


async def test_ids_are_never_reused_after_jobs_are_deleted(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t"))
    await store.cancel_jobs([job.id], "x", T0)
    await store.prune_jobs(T0 + 1, T0 - 1, T0 + 1, 10)
    await store.prune_jobs(T0 + 2, T0 + 2, T0 + 2, 10)
    last = (await all_events(store))[-1].id
    (other,) = await enqueue(store, NewJob(task="t"), now=T0 + 3)
    (event,) = await store.list_events(last, 10)
    assert event.id > last and event.job_id == other.id


async def test_list_events_pages_by_cursor_and_filters(store: Store) -> None:
    jobs = await enqueue(store, *[NewJob(task="t", tenant="a" if i % 2 else "b") for i in range(10)])
    page1 = await store.list_events(0, 4)
    page2 = await store.list_events(page1[-1].id, 4)
    page3 = await store.list_events(page2[-1].id, 4)
    assert [e.job_id for e in page1 + page2 + page3] == [j.id for j in jobs]
    assert len(page3) == 2 and await store.list_events(page3[-1].id, 4) == []

    tenant_a = await store.list_events(0, 100, tenant="a")
    assert [e.job_id for e in tenant_a] == [j.id for j in jobs if j.tenant == "a"]
    only = await store.list_events(0, 100, job_id=jobs[3].id)
    assert [e.job_id for e in only] == [jobs[3].id]
    assert await store.list_events(0, 100, job_id=jobs[3].id, tenant="b") == []
    assert await store.list_events(page1[0].id, 100, job_id=jobs[0].id) == []
    assert await store.list_events(0, 0) == [] and await store.list_events(0, -1) == []


async def test_a_cancel_cascade_emits_one_event_per_job(store: Store) -> None:
    a = NewJob(task="a")
    b = NewJob(task="b", depends_on=(a.id,))
    await enqueue(store, a, b)
    result = await store.cancel_jobs([a.id], "x", T0 + 1)
    assert [(e.job_id, e.type) for e in result.events] == [(a.id, ev.CANCELLED), (b.id, ev.CANCELLED)]
    assert result.events[1].data == {
        "state": JobState.CANCELLED.value,
        "attempt": 0,
        "reason": f"dependency {a.id} ended cancelled",
    }
