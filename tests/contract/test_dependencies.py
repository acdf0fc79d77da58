"""depends_on: blocked until every dependency succeeded; cancelled, transitively, when one cannot."""

from __future__ import annotations

import itertools

import pytest

from jobengine.core import events as ev
from jobengine.core.ids import JobId
from jobengine.core.models import FailOutcome, NewJob
from jobengine.core.states import JobState
from jobengine.errors import UnknownDependency
from jobengine.ports.store import Store

from .helpers import T0, all_events, claim, completion, enqueue, event_types, failure, get, run_to_success


async def test_a_job_waits_blocked_until_its_dependency_succeeds(store: Store) -> None:
    parent, child = NewJob(task="parent"), NewJob(task="child", queue="later")
    p, c = await enqueue(store, parent, NewJob(task="child", queue="later", depends_on=(parent.id,), id=child.id))
    assert p.state is JobState.QUEUED and c.state is JobState.BLOCKED
    assert await claim(store, T0, queues=["later"]) == []

    (running,) = await claim(store, T0 + 1)
    done = await store.complete_jobs([completion(running)], T0 + 2)
    assert [j.id for j in done.jobs] == [p.id, c.id]
    unblocked = done.jobs[1]
    assert unblocked.state is JobState.QUEUED and unblocked.updated_at == T0 + 2
    assert [e.type for e in done.events] == [ev.SUCCEEDED, ev.UNBLOCKED]
    assert done.events[1].job_id == c.id and done.events[1].data["state"] == "queued"
    assert await get(store, c.id) == unblocked
    assert [j.id for j in await claim(store, T0 + 3, queues=["later"])] == [c.id]


async def test_an_unblocked_job_whose_run_at_is_ahead_is_scheduled(store: Store) -> None:
    parent = NewJob(task="parent")
    _, child = await enqueue(store, parent, NewJob(task="child", run_at=T0 + 100, depends_on=(parent.id,)))
    await run_to_success(store, (await get(store, parent.id)), T0 + 1)
    assert (await get(store, child.id)).state is JobState.SCHEDULED


async def test_a_job_with_several_dependencies_waits_for_all(store: Store) -> None:
    a, b, c = NewJob(task="a", queue="qa"), NewJob(task="b", queue="qb"), NewJob(task="c", queue="qc")
    child = NewJob(task="child", depends_on=(a.id, b.id, c.id))
    await enqueue(store, a, b, c, child)
    await run_to_success(store, await get(store, a.id), T0 + 1)
    assert (await get(store, child.id)).state is JobState.BLOCKED
    # b and c complete in one batch: the child is unblocked once, by that batch.
    (rb,) = await claim(store, T0 + 2, queues=["qb"])
    (rc,) = await claim(store, T0 + 2, queues=["qc"])
    done = await store.complete_jobs([completion(rb), completion(rc)], T0 + 3)
    assert [e.type for e in done.events].count(ev.UNBLOCKED) == 1
    assert (await get(store, child.id)).state is JobState.QUEUED
    assert await get(store, child.id) == next(j for j in done.jobs if j.id == child.id)


async def test_a_fan_in_waits_for_its_last_dependency_whatever_its_position(store: Store) -> None:
    """The dependencies end in every order: the fan-in stays blocked until the last of them, wherever it is
    listed (a store may look for an unfinished one from either end of the list)."""
    for order in itertools.permutations(range(3)):
        deps = [NewJob(task="dep", queue=f"q{i}") for i in range(3)]
        child = NewJob(task="child", queue="fan-in", depends_on=tuple(d.id for d in deps))
        await enqueue(store, *deps, child)
        for step, i in enumerate(order):
            (running,) = await claim(store, T0 + 1, queues=[f"q{i}"])
            await store.complete_jobs([completion(running)], T0 + 2)
            expected = JobState.QUEUED if step == len(order) - 1 else JobState.BLOCKED
            assert (await get(store, child.id)).state is expected, (order, step)
        (fan_in,) = await claim(store, T0 + 3, queues=["fan-in"])
        await store.complete_jobs([completion(fan_in)], T0 + 4)


async def test_depends_on_keeps_its_order(store: Store) -> None:
    a, b, c = NewJob(task="a"), NewJob(task="b"), NewJob(task="c")
    order = (c.id, a.id, b.id)
    *_, child = await enqueue(store, a, b, c, NewJob(task="child", depends_on=order))
    assert child.depends_on == order
    assert (await get(store, child.id)).depends_on == order


async def test_dead_dependency_cancels_dependents_transitively(store: Store) -> None:
    a = NewJob(task="a", max_attempts=1)
    b = NewJob(task="b", depends_on=(a.id,))
    c = NewJob(task="c", depends_on=(b.id,))
    d = NewJob(task="d", depends_on=(c.id,))
    unrelated = NewJob(task="x", queue="other")
    await enqueue(store, a, b, c, d, unrelated)
    (running,) = await claim(store, T0 + 1)
    result = await store.fail_jobs([failure(running, T0 + 2, FailOutcome.DEAD, message="kaput")], T0 + 2)
    by_id = {j.id: j for j in result.jobs}
    assert by_id[a.id].state is JobState.DEAD
    assert by_id[b.id].state is JobState.CANCELLED and by_id[b.id].reason == f"dependency {a.id} ended dead"
    assert by_id[c.id].reason == f"dependency {b.id} ended cancelled"
    assert by_id[d.id].reason == f"dependency {c.id} ended cancelled"
    for job_id in (b.id, c.id, d.id):
        job = await get(store, job_id)
        assert job.state is JobState.CANCELLED and job.finished_at == T0 + 2 and job == by_id[job_id]
        assert await event_types(store, job_id) == [ev.ENQUEUED, ev.CANCELLED]
    assert sorted(e.type for e in result.events) == sorted([ev.DEAD, ev.CANCELLED, ev.CANCELLED, ev.CANCELLED])
    assert (await get(store, unrelated.id)).state is JobState.QUEUED


async def test_failure_with_outcome_cancelled_cancels_dependents(store: Store) -> None:
    a = NewJob(task="a")
    b = NewJob(task="b", depends_on=(a.id,))
    await enqueue(store, a, b)
    (running,) = await claim(store, T0)
    await store.fail_jobs([failure(running, T0 + 1, FailOutcome.CANCELLED)], T0 + 1)
    child = await get(store, b.id)
    assert child.state is JobState.CANCELLED and child.reason == f"dependency {a.id} ended cancelled"


async def test_a_retryable_failure_leaves_dependents_blocked(store: Store) -> None:
    a = NewJob(task="a")
    b = NewJob(task="b", depends_on=(a.id,))
    await enqueue(store, a, b)
    (running,) = await claim(store, T0)
    result = await store.fail_jobs([failure(running, T0 + 1, retry_at=T0 + 5)], T0 + 1)
    assert [j.id for j in result.jobs] == [a.id]
    assert (await get(store, b.id)).state is JobState.BLOCKED


async def test_cancelling_a_dependency_cancels_dependents_transitively(store: Store) -> None:
    a = NewJob(task="a")
    b = NewJob(task="b", depends_on=(a.id,))
    c = NewJob(task="c", depends_on=(b.id,))
    await enqueue(store, a, b, c)
    result = await store.cancel_jobs([a.id], "operator", T0 + 1)
    assert {j.id: j.state for j in result.jobs} == {
        a.id: JobState.CANCELLED,
        b.id: JobState.CANCELLED,
        c.id: JobState.CANCELLED,
    }
    assert (await get(store, a.id)).reason == "operator"
    assert (await get(store, c.id)).reason == f"dependency {b.id} ended cancelled"


async def test_a_dependent_named_in_the_same_cancel_is_cancelled_once(store: Store) -> None:
    a = NewJob(task="a")
    b = NewJob(task="b", depends_on=(a.id,))
    await enqueue(store, a, b)
    result = await store.cancel_jobs([a.id, b.id], "operator", T0 + 1)
    assert sorted(j.id for j in result.jobs) == sorted([a.id, b.id])
    assert [e.type for e in result.events] == [ev.CANCELLED, ev.CANCELLED]
    assert (await get(store, b.id)).reason == f"dependency {a.id} ended cancelled"


async def test_unknown_dependency_is_refused_and_nothing_is_kept(store: Store) -> None:
    fresh = NewJob(task="t")
    missing = JobId("0190f2c4-0000-7000-8000-00000000dead")
    with pytest.raises(UnknownDependency) as info:
        await store.insert_jobs([fresh, NewJob(task="t", depends_on=(missing,))], T0, [(), ()])
    assert info.value.job_id == missing
    assert await store.get_jobs([fresh.id]) == []
    assert await all_events(store) == []


async def test_a_dependency_may_come_earlier_in_the_same_batch_but_not_later(store: Store) -> None:
    a = NewJob(task="a")
    b = NewJob(task="b", depends_on=(a.id,))
    inserted = await store.insert_jobs([a, b], T0, [(), ()])
    assert [j.state for j in inserted.jobs] == [JobState.QUEUED, JobState.BLOCKED]

    later = NewJob(task="later")
    with pytest.raises(UnknownDependency):
        await store.insert_jobs([NewJob(task="early", depends_on=(later.id,)), later], T0, [(), ()])
    assert await store.get_jobs([later.id]) == []


async def test_a_dependency_that_already_succeeded_makes_the_job_runnable(store: Store) -> None:
    (a,) = await enqueue(store, NewJob(task="a"))
    await run_to_success(store, a, T0 + 1)
    (b,) = await enqueue(store, NewJob(task="b", depends_on=(a.id,)), now=T0 + 2)
    assert b.state is JobState.QUEUED
    (c,) = await enqueue(store, NewJob(task="c", depends_on=(a.id,), run_at=T0 + 50), now=T0 + 2)
    assert c.state is JobState.SCHEDULED


async def test_a_stale_dependency_counts_as_its_outcome(store: Store) -> None:
    (ok,) = await enqueue(store, NewJob(task="ok"))
    await run_to_success(store, ok, T0 + 1)
    (bad,) = await enqueue(store, NewJob(task="bad"), now=T0 + 1)
    await store.cancel_jobs([bad.id], "no", T0 + 1)
    pruned = await store.prune_jobs(T0 + 5, T0 - 100, T0 + 5, 10)
    assert pruned.staled == 2
    runnable, cancelled = await enqueue(
        store, NewJob(task="x", depends_on=(ok.id,)), NewJob(task="y", depends_on=(bad.id,)), now=T0 + 6
    )
    assert runnable.state is JobState.QUEUED
    assert cancelled.state is JobState.CANCELLED and cancelled.reason == f"dependency {bad.id} ended cancelled"


async def test_a_dependency_already_dead_cancels_the_new_job_at_once(store: Store) -> None:
    (a,) = await enqueue(store, NewJob(task="a", max_attempts=1))
    (running,) = await claim(store, T0)
    await store.fail_jobs([failure(running, T0 + 1, FailOutcome.DEAD)], T0 + 1)
    b = NewJob(task="b", depends_on=(a.id,))
    c = NewJob(task="c", depends_on=(b.id,))
    inserted = await store.insert_jobs([b, c], T0 + 2, [(), ()])
    assert inserted.created == [True, True]
    jb, jc = inserted.jobs
    assert jb.state is JobState.CANCELLED and jb.reason == f"dependency {a.id} ended dead"
    assert jb.finished_at == T0 + 2
    assert jc.state is JobState.CANCELLED and jc.reason == f"dependency {b.id} ended cancelled"
    assert [(e.job_id, e.type) for e in inserted.events] == [
        (b.id, ev.ENQUEUED),
        (b.id, ev.CANCELLED),
        (c.id, ev.ENQUEUED),
        (c.id, ev.CANCELLED),
    ]
    assert inserted.events[0].data["state"] == "blocked"
    assert await store.get_jobs([b.id, c.id]) == [jb, jc]


async def test_a_dependency_deleted_by_retention_after_succeeding_still_counts(store: Store) -> None:
    """Retention deletes only terminal jobs, and a dead or cancelled dependency would already have
    cancelled the dependent, so a dependency that is gone can only have succeeded."""
    a, b = NewJob(task="a", queue="qa"), NewJob(task="b", queue="qb")
    child = NewJob(task="child", depends_on=(a.id, b.id))
    await enqueue(store, a, b, child)
    await run_to_success(store, await get(store, a.id), T0 + 1)
    await store.prune_jobs(T0 + 2, T0 - 100, T0 + 2, 10)  # a -> stale
    await store.prune_jobs(T0 + 3, T0 + 3, T0 + 3, 10)  # a -> deleted
    assert await store.get_jobs([a.id]) == []
    await run_to_success(store, await get(store, b.id), T0 + 4)
    unblocked = await get(store, child.id)
    assert unblocked.state is JobState.QUEUED
    assert unblocked.depends_on == (a.id, b.id)


async def test_a_job_that_others_depend_on_says_so(store: Store) -> None:
    # The worker reports such a job's outcome at once (its dependents wait on it), others' in batches.
    parent, loner = NewJob(task="parent"), NewJob(task="loner")
    p, _, lone = await enqueue(store, parent, NewJob(task="child", depends_on=(parent.id,)), loner)
    assert p.has_dependents and not lone.has_dependents  # as returned, read back and claimed
    assert (await get(store, parent.id)).has_dependents and not (await get(store, loner.id)).has_dependents
    claimed = {j.id: j.has_dependents for j in await claim(store, T0 + 1)}
    assert claimed == {parent.id: True, loner.id: False}
    # A dependent enqueued later, while its dependency runs, is seen from then on.
    (later,) = await enqueue(store, NewJob(task="later"))
    (running,) = await claim(store, T0 + 2)
    await enqueue(store, NewJob(task="child", depends_on=(later.id,)))
    assert (await get(store, running.id)).has_dependents


async def test_another_tenants_job_is_an_unknown_dependency(store: Store) -> None:
    """A tenant cannot name, or learn of, another tenant's job: stored or earlier in the same batch."""
    (theirs,) = await enqueue(store, NewJob(task="t", tenant="globex"))
    mine = NewJob(task="t", tenant="acme")
    with pytest.raises(UnknownDependency, match=theirs.id) as info:
        await store.insert_jobs([mine, NewJob(task="t", tenant="acme", depends_on=(theirs.id,))], T0, [(), ()])
    assert info.value.job_id == theirs.id
    assert await store.get_jobs([mine.id]) == []

    staged = NewJob(task="t", tenant="globex")
    with pytest.raises(UnknownDependency, match=staged.id):
        await store.insert_jobs([staged, NewJob(task="t", tenant="acme", depends_on=(staged.id,))], T0, [(), ()])
    assert await store.get_jobs([staged.id]) == []
    (ok,) = await enqueue(store, NewJob(task="t", tenant="globex", depends_on=(theirs.id,)))
    assert ok.state is JobState.BLOCKED  # the same tenant's job is a dependency as before
