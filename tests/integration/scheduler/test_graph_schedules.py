"""Schedules that fire graphs: a tick makes one run whose jobs are the nodes of one graph (its id the run's),
exactly once between racing schedulers; on SQLite and PostgreSQL, on a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.graph_template import GraphTemplate, NodeTemplate
from jobengine.core.graphs import GraphState
from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure, Job
from jobengine.core.runs import RunFilter, RunState
from jobengine.core.schedules import OverlapPolicy, ScheduleSpec
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.engine.canvas import TaskCall, chain, chord
from jobengine.errors import IllegalState

from .conftest import T0

pytestmark = pytest.mark.timeout(300)


def diamond() -> GraphTemplate:
    return GraphTemplate.from_json({
        "name": "diamond",
        "nodes": [
            {"name": "extract", "task": "extract", "payload": {"day": 1}},
            {"name": "left", "task": "clean"},
            {"name": "right", "task": "clean", "priority": 5},
            {"name": "load", "task": "load", "max_attempts": 1},
        ],
        "edges": [["extract", "left"], ["extract", "right"], ["left", "load"], ["right", "load"]],
    })  # fmt: skip


def every(seconds: float, template: GraphTemplate, name: str = "g", **fields: object) -> ScheduleSpec:
    return ScheduleSpec(name=name, every=seconds, template=template, **fields)  # type: ignore[arg-type]


async def claim(engine: Engine) -> list[Job]:
    return await engine.transitions.fetch_jobs(["default"], 100, WorkerId("w"), 300)


async def complete(engine: Engine, jobs: list[Job]) -> None:
    await engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "", result=j.task) for j in jobs])


async def test_a_tick_fires_one_graph_that_completes(engine: Engine, clock: ManualClock) -> None:
    schedule = await engine.schedules.create(every(100, diamond()))
    clock.set(T0 + 100)
    (run,) = await engine.scheduler.fire_due_schedules()
    assert (run.state, run.summary.total, run.tick) == (RunState.QUEUED, 4, T0 + 100)
    graph = await engine.graphs.get(run.id)  # the graph a tick fires has its run's id
    assert (graph.name, graph.total, graph.state) == ("diamond", 4, GraphState.PENDING)
    jobs = await engine.runs.jobs(run.id)
    assert sorted(j.task for j in jobs) == ["clean", "clean", "extract", "load"]
    assert {(j.graph_id, j.run_id, j.schedule_id) for j in jobs} == {(run.id, run.id, schedule.id)}
    by_task = {j.task: j for j in jobs}
    assert by_task["load"].max_attempts == 1 and by_task["extract"].payload == {"day": 1}

    (first,) = await claim(engine)  # only the head is queued; the others wait on their parents
    assert first.task == "extract"
    assert (await engine.runs.get(run.id)).state is RunState.RUNNING
    await complete(engine, [first])
    middle = await claim(engine)
    assert sorted(j.task for j in middle) == ["clean", "clean"]
    await complete(engine, middle)
    (last,) = await claim(engine)
    assert last.task == "load"
    assert (await engine.graphs.parent_results(last)) == {"left": "clean", "right": "clean"}
    clock.advance(5)
    await complete(engine, [last])

    done = await engine.graphs.get(run.id)
    assert (done.state, done.done) == (GraphState.SUCCEEDED, 4)
    ended = await engine.runs.get(run.id)
    assert (ended.state, ended.summary.succeeded, ended.finished_at) == (RunState.COMPLETED, 4, T0 + 105)
    events = [e for e in await engine.events(limit=1000) if e.type == "graph.completed"]
    assert [e.data["graph_id"] for e in events] == [run.id]
    assert len(await engine.graphs.list()) == 1


async def test_two_schedulers_racing_fire_one_graph_per_tick(clock: ManualClock, engine: Engine) -> None:
    """No leader: two engines on one database call the scheduler pass at the same instants."""
    settings = engine.settings
    async with Engine.from_settings(settings, clock) as other:
        await engine.schedules.create(every(1, diamond()))
        fired = 0
        for i in range(1, 21):
            clock.set(T0 + i + 0.001)
            both = await asyncio.gather(engine.scheduler.fire_due_schedules(), other.scheduler.fire_due_schedules())
            fired += sum(len(r) for r in both)
        assert fired == 20
        runs = await engine.runs.list(RunFilter(limit=100))
        graphs = await engine.graphs.list(limit=100)
        assert sorted(g.id for g in graphs) == sorted(r.id for r in runs) and len(graphs) == 20
        assert sorted(r.tick for r in runs if r.tick is not None) == [T0 + i for i in range(1, 21)]
        counts = await engine.count_jobs()
        assert sum(counts.values()) == 80


async def test_a_failed_node_fails_the_graph_and_errs_the_run(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(every(100, chain(*(TaskCall(t) for t in ("a", "b"))).as_template()))
    clock.set(T0 + 100)
    (run,) = await engine.scheduler.fire_due_schedules()
    (a,) = await claim(engine)
    error = AttemptError(a.attempt, clock.now(), "RuntimeError", "boom")
    await engine.transitions.fail_jobs([Failure(a.id, a.lease_token or "", error, FailOutcome.DEAD, clock.now())])
    graph = await engine.graphs.get(run.id)
    assert graph.state is GraphState.FAILED
    ended = await engine.runs.get(run.id)
    assert (ended.state, ended.summary.dead, ended.summary.cancelled) == (RunState.ERROR, 1, 1)
    with pytest.raises(IllegalState, match="retry the graph"):
        await engine.runs.retry(run.id)
    await engine.graphs.retry(run.id)  # in place: the run reopens, counting each node again as it runs again
    reopened = await engine.runs.get(run.id)
    assert (reopened.state, reopened.summary.pending, reopened.summary.cancelled) == (RunState.RUNNING, 1, 1)
    (again,) = await claim(engine)
    await complete(engine, [again])
    (b,) = await claim(engine)
    await complete(engine, [b])
    assert (await engine.graphs.get(run.id)).state is GraphState.SUCCEEDED
    assert (await engine.runs.get(run.id)).state is RunState.COMPLETED


async def test_overlap_queue_plans_the_waiting_graph_later(engine: Engine, clock: ManualClock) -> None:
    await engine.schedules.create(every(10, chord([TaskCall("part")] * 2, TaskCall("sum")).as_template(),
                                        overlap=OverlapPolicy.QUEUE))  # fmt: skip
    clock.set(T0 + 10)
    await engine.scheduler.fire_due_schedules()
    clock.set(T0 + 20)
    (waiting,) = await engine.scheduler.fire_due_schedules()
    assert waiting.state is RunState.PLANNING and len(await engine.graphs.list()) == 1
    for _ in range(2):
        await complete(engine, await claim(engine))
    (planned,) = await engine.scheduler.plan_waiting_runs()
    assert planned.id == waiting.id and planned.summary.total == 3
    assert (await engine.graphs.get(waiting.id)).total == 3


async def test_trigger_and_simulate_a_graph_schedule(engine: Engine, clock: ManualClock) -> None:
    schedule = await engine.schedules.create(every(100, diamond()))
    run = await engine.schedules.trigger(schedule.id, reason="by hand")
    assert (await engine.graphs.get(run.id)).total == 4
    sim = await engine.schedules.simulate(schedule.id, count=2)
    assert [len(r.jobs) for r in sim.runs] == [4, 4]
    stored = await engine.schedules.get(schedule.id)
    assert stored.spec.template == diamond()  # read back from the store as it was given


async def test_a_blocked_node_is_not_announced(engine: Engine, clock: ManualClock) -> None:
    """Only the graph's head is claimable at first, whatever the order of the nodes in the template."""
    template = GraphTemplate((NodeTemplate("tail", "t", after=("head",)), NodeTemplate("head", "h")), name="reversed")
    await engine.schedules.create(every(100, template))
    clock.set(T0 + 100)
    (run,) = await engine.scheduler.fire_due_schedules()
    states = sorted((j.task, j.state) for j in await engine.runs.jobs(run.id))
    assert states == [("h", JobState.QUEUED), ("t", JobState.BLOCKED)]


async def test_a_cleanup_node_runs_after_a_failure_and_the_run_counts_it(engine: Engine, clock: ManualClock) -> None:
    template = GraphTemplate.from_json({
        "name": "with-cleanup",
        "nodes": [{"name": "work", "task": "work"}, {"name": "report", "task": "report"},
                  {"name": "cleanup", "task": "cleanup", "policy": "always"}],
        "edges": [["work", "report"], ["report", "cleanup"]],
    })  # fmt: skip
    await engine.schedules.create(every(100, template))
    clock.set(T0 + 100)
    (run,) = await engine.scheduler.fire_due_schedules()
    (work,) = await claim(engine)
    error = AttemptError(work.attempt, clock.now(), "RuntimeError", "boom")
    await engine.transitions.fail_jobs([Failure(work.id, work.lease_token or "", error, FailOutcome.DEAD, clock.now())])
    (cleanup,) = await claim(engine)  # runs although its parent was cancelled: the run counts it unfinished
    assert cleanup.task == "cleanup"
    mid = await engine.runs.get(run.id)
    assert (mid.state, mid.summary.pending) == (RunState.RUNNING, 1)
    await complete(engine, [cleanup])
    done = await engine.runs.get(run.id)
    assert (done.state, done.summary.succeeded, done.summary.dead, done.summary.cancelled) == (RunState.ERROR, 1, 1, 1)
    assert (await engine.graphs.get(run.id)).state is GraphState.FAILED
