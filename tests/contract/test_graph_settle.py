"""A graph node that a failure policy lets run is queued again in the transaction that ended its parent:
the transition's result lists every job once, in the state the transaction left it."""

from __future__ import annotations

from jobengine.core.graphs import GraphSpec, NodeSpec, Policy
from jobengine.core.models import Changed, FailOutcome, Job, NewJob
from jobengine.core.states import JobState
from jobengine.ports.store import Store

from .helpers import T0, claim, failure, get


async def _graph(store: Store) -> tuple[Job, Job, Job]:
    """a -> b (``always``: runs whatever a did), a -> c (cancelled with a)."""
    spec = GraphSpec(
        "g",
        "default",
        (
            NodeSpec("a", NewJob(task="a")),
            NodeSpec("b", NewJob(task="b"), ("a",), Policy.ALWAYS),
            NodeSpec("c", NewJob(task="c"), ("a",)),
        ),
    )
    jobs = spec.jobs()
    inserted = await store.graphs().insert_graph(spec, jobs, [()] * len(jobs), T0)
    by_task = {j.task: j for j in inserted.jobs}
    return by_task["a"], by_task["b"], by_task["c"]


def _once(changed: Changed) -> dict[str, JobState]:
    ids = [j.id for j in changed.jobs]
    assert len(ids) == len(set(ids)), f"a job is listed more than once: {[(j.task, j.state) for j in changed.jobs]}"
    return {j.task: j.state for j in changed.jobs}


async def test_a_dead_node_lists_the_node_its_policy_revives_once_queued(store: Store) -> None:
    a, b, c = await _graph(store)
    (running,) = await claim(store, T0 + 1)
    assert running.id == a.id
    changed = await store.fail_jobs([failure(running, T0 + 2, FailOutcome.DEAD)], T0 + 2)
    assert _once(changed) == {"a": JobState.DEAD, "b": JobState.QUEUED, "c": JobState.CANCELLED}
    assert [(await get(store, j.id)).state for j in (b, c)] == [JobState.QUEUED, JobState.CANCELLED]
    # The events stay the history: b was cancelled with a, then queued again.
    assert [e.type for e in changed.events if e.job_id == b.id] == ["job.cancelled", "job.retried"]


async def test_a_cancelled_node_lists_the_node_its_policy_revives_once_queued(store: Store) -> None:
    a, b, c = await _graph(store)
    changed = await store.cancel_jobs([a.id], "stop", T0 + 1)
    assert _once(changed) == {"a": JobState.CANCELLED, "b": JobState.QUEUED, "c": JobState.CANCELLED}
    assert [(await get(store, j.id)).state for j in (b, c)] == [JobState.QUEUED, JobState.CANCELLED]
