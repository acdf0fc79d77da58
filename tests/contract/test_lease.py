"""Lease fencing: only the current holder of a running job's token changes it."""

from __future__ import annotations

from jobengine.core import events as ev
from jobengine.core.ids import LeaseToken
from jobengine.core.models import Completion, FailOutcome, Lease, NewJob, Phase, PhaseState, PhaseUpdate
from jobengine.core.states import JobState
from jobengine.ports.store import Store

from .helpers import T0, all_events, claim, completion, enqueue, failure, get, token

WRONG = LeaseToken("0" * 24)


async def test_complete_with_a_wrong_token_changes_nothing(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    events_before = await all_events(store)
    result = await store.complete_jobs([Completion(running.id, WRONG, "x")], T0 + 1)
    assert (result.jobs, result.events) == ([], [])
    assert await get(store, running.id) == running
    assert await all_events(store) == events_before


async def test_complete_with_the_token_succeeds_the_job(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    result = await store.complete_jobs([completion(running, {"n": 1})], T0 + 4)
    (done,) = result.jobs
    assert done.state is JobState.SUCCEEDED and done.result == {"n": 1} and done.progress == 1.0
    assert done.finished_at == T0 + 4 and done.updated_at == T0 + 4
    assert (done.lease_worker, done.lease_token, done.lease_expires_at) == (None, None, None)
    assert done.attempt == 1 and done.started_at == T0
    (event,) = result.events
    assert event.type == ev.SUCCEEDED and event.data == {"state": "succeeded", "attempt": 1, "duration": 4.0}
    again = await store.complete_jobs([completion(running, "twice")], T0 + 5)
    assert again.jobs == [] and (await get(store, done.id)).result == {"n": 1}


async def test_a_batch_applies_to_the_held_jobs_only(store: Store) -> None:
    await enqueue(store, NewJob(task="a"), NewJob(task="b"), NewJob(task="c"))
    a, b, c = await claim(store, T0)
    result = await store.complete_jobs([completion(a), Completion(b.id, WRONG), completion(c)], T0 + 1)
    assert [j.id for j in result.jobs] == [a.id, c.id]
    assert (await get(store, b.id)).state is JobState.RUNNING


async def test_release_requeues_without_spending_an_attempt_and_kills_the_token(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    result = await store.release_jobs([Lease(running.id, token(running))], T0 + 1)
    (released,) = result.jobs
    assert released.state is JobState.QUEUED and released.attempt == 0
    assert (released.lease_worker, released.lease_token, released.lease_expires_at) == (None, None, None)
    assert [e.type for e in result.events] == [ev.RELEASED]
    assert await get(store, running.id) == released

    assert (await store.complete_jobs([completion(running)], T0 + 2)).jobs == []
    assert (await store.release_jobs([Lease(running.id, token(running))], T0 + 2)).jobs == []
    (again,) = await claim(store, T0 + 2)
    assert again.attempt == 1 and token(again) != token(running)


async def test_after_a_rescue_the_old_token_is_dead(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)  # lease until T0 + 30
    rescued = await store.fail_jobs(
        [failure(running, T0 + 31, retry_at=T0 + 31, message="lease expired", only_if_expired_at=T0 + 31)], T0 + 31
    )
    assert [j.state for j in rescued.jobs] == [JobState.FAILED]
    assert (await store.complete_jobs([completion(running)], T0 + 32)).jobs == []
    hb = await store.heartbeat_jobs([Lease(running.id, token(running))], T0 + 60, T0 + 32)
    assert hb.held == frozenset()


async def test_heartbeat_extends_held_leases_and_reports_cancel_requests(store: Store) -> None:
    await enqueue(store, NewJob(task="a"), NewJob(task="b"))
    a, b = await claim(store, T0)
    hb = await store.heartbeat_jobs([Lease(a.id, token(a)), Lease(b.id, WRONG)], T0 + 50, T0 + 10)
    assert hb.held == frozenset({a.id}) and hb.cancel_requested == frozenset()
    held = await get(store, a.id)
    assert held.lease_expires_at == T0 + 50 and held.updated_at == T0 + 10 and held.state is JobState.RUNNING
    assert (await get(store, b.id)).lease_expires_at == b.lease_expires_at

    await store.cancel_jobs([a.id], "stop", T0 + 11)
    hb = await store.heartbeat_jobs([Lease(a.id, token(a)), Lease(b.id, token(b))], T0 + 60, T0 + 12)
    assert hb.held == frozenset({a.id, b.id}) and hb.cancel_requested == frozenset({a.id})


async def test_save_phases_is_fenced_and_derives_progress(store: Store) -> None:
    (job,) = await enqueue(store, NewJob(task="t"), phases=[("a", "b")])
    (running,) = await claim(store, T0)
    phases = (Phase("a", PhaseState.SUCCEEDED, 1.0), Phase("b", PhaseState.RUNNING, 0.5))
    wrong = await store.save_phases([PhaseUpdate(job.id, WRONG, phases, event="phase.started")], T0 + 1)
    assert (wrong.jobs, wrong.events) == ([], [])
    assert (await get(store, job.id)).phases == running.phases

    result = await store.save_phases(
        [PhaseUpdate(job.id, token(running), phases, event="phase.started", event_data={"phase": "b"})], T0 + 2
    )
    (saved,) = result.jobs
    assert saved.phases == phases and saved.progress == 0.75 and saved.updated_at == T0 + 2
    (event,) = result.events
    assert event.type == ev.PHASE
    assert event.data == {"state": "running", "attempt": 1, "phase_event": "phase.started", "phase": "b"}
    quiet = await store.save_phases([PhaseUpdate(job.id, token(running), phases)], T0 + 3)
    assert len(quiet.jobs) == 1 and quiet.events == []

    await store.complete_jobs([completion(running)], T0 + 4)
    late = await store.save_phases([PhaseUpdate(job.id, token(running), ())], T0 + 5)
    assert late.jobs == [] and (await get(store, job.id)).phases == phases


async def test_expired_jobs_lists_running_jobs_whose_lease_ran_out(store: Store) -> None:
    await enqueue(store, NewJob(task="a"), NewJob(task="b"), NewJob(task="c", queue="idle"))
    a, b = await claim(store, T0)  # both leased until T0 + 30
    await store.heartbeat_jobs([Lease(b.id, token(b))], T0 + 100, T0 + 20)
    assert await store.expired_jobs(T0 + 30, 10) == []  # "before now": exactly at expiry is not yet expired
    expired = await store.expired_jobs(T0 + 31, 10)
    assert [j.id for j in expired] == [a.id]
    assert expired[0] == await get(store, a.id)
    assert len(await store.expired_jobs(T0 + 101, 10)) == 2
    assert len(await store.expired_jobs(T0 + 101, 1)) == 1


async def test_a_rescue_does_not_apply_once_the_worker_heartbeated(store: Store) -> None:
    await enqueue(store, NewJob(task="t"))
    (running,) = await claim(store, T0)
    (seen,) = await store.expired_jobs(T0 + 31, 10)  # the rescuer's view at T0 + 31 ...
    await store.heartbeat_jobs([Lease(running.id, token(running))], T0 + 90, T0 + 31)  # ... races a heartbeat
    result = await store.fail_jobs(
        [failure(seen, T0 + 32, FailOutcome.RETRY, retry_at=T0 + 32, only_if_expired_at=T0 + 31)], T0 + 32
    )
    assert result.jobs == [] and (await get(store, running.id)).state is JobState.RUNNING
    # Without the condition the same failure applies.
    result = await store.fail_jobs([failure(seen, T0 + 33, retry_at=T0 + 33)], T0 + 33)
    assert [j.state for j in result.jobs] == [JobState.FAILED]
