"""Run requests on SQLite and PostgreSQL: full and incremental runs over items, the stream's cursor (moved
only when every segment succeeded), idempotent run ids, and a preview that writes nothing."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure, Job
from jobengine.core.run_requests import PriorityClass, RunMode, RunRequest
from jobengine.core.runs import RunFilter, RunState, RunTrigger
from jobengine.engine import Engine
from jobengine.errors import IllegalState, InvalidJob
from tests.support.tables import table_counts

pytestmark = pytest.mark.timeout(300)


async def claim(engine: Engine, limit: int = 1000) -> list[Job]:
    return await engine.transitions.fetch_jobs(["default"], limit, WorkerId("w"), 300)


async def complete(engine: Engine, jobs: list[Job]) -> list[Any]:
    """Complete ``jobs`` as a worker would; the items they did."""
    await engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "") for j in jobs])
    return [item for j in jobs for item in j.payload["items"]]  # type: ignore[index]


async def cursor(engine: Engine, request: RunRequest) -> Any:
    found = await engine.store.scheduling().get_cursor("default", request.stream)
    return None if found is None else found.value


async def test_full_then_incremental_takes_only_the_new_items(engine: Engine) -> None:
    first = RunRequest(task="score", items=tuple(range(1000)), segment_size=100, source="accounts")
    run = await engine.runs.start(first)
    assert (run.trigger, run.state, run.items, run.summary.total) == (RunTrigger.REQUEST, RunState.QUEUED, 1000, 10)
    assert await cursor(engine, first) is None
    jobs = await claim(engine)
    assert sorted(await complete(engine, jobs[:9])) != list(range(1000))
    assert await cursor(engine, first) is None  # one segment still to go: the cursor stays
    await complete(engine, jobs[9:])
    assert (await engine.runs.get(run.id)).state is RunState.COMPLETED
    assert await cursor(engine, first) == 999

    more = RunRequest(task="score", items=tuple(range(1100)), mode="incremental", segment_size=100,  # type: ignore[arg-type]
                      source="accounts")  # fmt: skip
    preview = await engine.runs.preview(more)
    assert (len(preview.plan.todo), preview.plan.before_cursor, preview.segments) == (100, 1000, 1)
    second = await engine.runs.start(more)
    assert second.items == 100
    done = await complete(engine, await claim(engine))
    assert sorted(done) == list(range(1000, 1100))
    assert await cursor(engine, more) == 1099
    again = await engine.runs.start(more)  # nothing new: born completed, no work
    assert (again.state, again.no_work) == (RunState.COMPLETED, True)


async def test_a_run_killed_halfway_leaves_the_cursor_and_the_next_redoes_the_rest(engine: Engine) -> None:
    base = RunRequest(task="score", items=tuple(f"k{i:04}" for i in range(100)), segment_size=50)
    await engine.runs.start(base)
    await complete(engine, await claim(engine))
    assert await cursor(engine, base) == "k0099"
    grown = RunRequest(task="score", items=tuple(f"k{i:04}" for i in range(200)), segment_size=10,
                       mode=RunMode.INCREMENTAL)  # fmt: skip
    run = await engine.runs.start(grown)
    jobs = await claim(engine)
    assert len(jobs) == 10
    did = await complete(engine, jobs[::2])  # half the segments end; the worker dies holding the others
    await engine.runs.cancel(run.id, reason="workers lost")
    assert await cursor(engine, grown) == "k0099"
    rest = await engine.runs.start(grown)
    assert rest.items == 50
    redone = await complete(engine, await claim(engine))
    assert sorted(did + redone) == [f"k{i:04}" for i in range(100, 200)]
    assert not set(did) & set(redone)
    assert await cursor(engine, grown) == "k0199"


async def test_a_failed_segment_leaves_the_cursor(engine: Engine) -> None:
    request = RunRequest(task="score", items=(3, 1, 2, 2), segment_size=1)
    run = await engine.runs.start(request)
    assert run.items == 3  # sorted and de-duplicated
    jobs = await claim(engine)
    assert [j.payload["items"] for j in jobs] == [[1], [2], [3]]  # type: ignore[index]
    await complete(engine, jobs[:2])
    await engine.runs.cancel(run.id)
    assert await cursor(engine, request) is None


async def test_a_retried_run_counts_as_done(engine: Engine) -> None:
    request = RunRequest(task="score", items=(1, 2, 3), segment_size=1, mode=RunMode.INCREMENTAL)
    run = await engine.runs.start(request)
    first, *rest = await claim(engine)
    await complete(engine, rest)
    assert first.lease_token is not None
    error = AttemptError(first.attempt, engine.clock.now(), "RuntimeError", "boom")
    await engine.transitions.fail_jobs([Failure(first.id, first.lease_token, error, FailOutcome.DEAD, 0)])
    assert (await engine.runs.get(run.id)).state is RunState.ERROR
    await engine.runs.retry(run.id)
    await complete(engine, await claim(engine))
    assert await cursor(engine, request) is None  # a retry moves no cursor
    again = await engine.runs.start(request)  # ...but nothing is left to do: born completed, cursor moved
    assert (again.state, again.no_work) == (RunState.COMPLETED, True)
    assert await cursor(engine, request) == 3


async def test_a_retried_simulate_run_keeps_its_mode_and_its_diff_covers_every_item(engine: Engine) -> None:
    full = RunRequest(task="score", items=(1, 2, 3), segment_size=1)
    base = await engine.runs.start(full)
    await complete(engine, await claim(engine))
    simulate = replace(full, mode=RunMode.SIMULATE)
    sim = await engine.runs.start(simulate)
    first, *rest = await claim(engine)
    doubled = [Completion(j.id, j.lease_token or "", [2 * i for i in j.payload["items"]]) for j in rest]  # type: ignore[index]
    await engine.transitions.complete_jobs(doubled)
    error = AttemptError(first.attempt, engine.clock.now(), "RuntimeError", "boom")
    await engine.transitions.fail_jobs([Failure(first.id, first.lease_token or "", error, FailOutcome.DEAD, 0)])
    assert (await engine.runs.get(sim.id)).state is RunState.ERROR

    retried = await engine.runs.retry(sim.id)
    assert (retried.trigger, retried.mode) == (RunTrigger.RETRY, "simulate")
    assert [r.id for r in await engine.runs.list(RunFilter(mode="simulate"))] == [retried.id, sim.id]
    (again,) = await claim(engine)
    await engine.transitions.complete_jobs([Completion(again.id, again.lease_token or "", [2])])
    diff = await engine.runs.diff(retried.id)
    # The retry's own item and those of the run it retried, against the full run's (None: no result).
    assert diff.base_run_id == base.id and diff.unfinished == 0
    assert diff.counts == {"same": 0, "changed": 3, "new": 0, "gone": 0}
    assert await cursor(engine, simulate) == 3  # moved by the full run only


async def test_simulate_is_marked_and_moves_no_cursor(engine: Engine) -> None:
    request = RunRequest(task="score", items=("a", "b"), mode=RunMode.SIMULATE, version="v2",
                         environment={"region": "eu"}, priority=PriorityClass.EMERGENCY)  # fmt: skip
    run = await engine.runs.start(request)
    (job, *_) = jobs = await claim(engine)
    assert job.payload == {"mode": "simulate", "version": "v2", "environment": {"region": "eu"}, "items": ["a", "b"],
                           "segment": 0, "segments": 1}  # fmt: skip
    assert job.priority == 100_000
    await complete(engine, jobs)
    assert (await engine.runs.get(run.id)).state is RunState.COMPLETED
    assert await cursor(engine, request) is None


async def test_one_run_id_makes_one_run(engine: Engine) -> None:
    request = RunRequest(task="score", items=("b", "a"), run_id="nightly-1")
    first = await engine.runs.start(request)
    second = await engine.runs.start(RunRequest(task="score", items=("a", "b", "a"), run_id="nightly-1"))
    assert (first.id, second.id) == ("nightly-1", "nightly-1")
    assert len(await claim(engine)) == 1
    with pytest.raises(IllegalState, match="different request"):
        await engine.runs.start(RunRequest(task="score", items=("a",), run_id="nightly-1"))
    with pytest.raises(IllegalState, match="different request"):
        await engine.runs.start(request, tenant="other")


async def test_bad_requests_name_the_field() -> None:
    with pytest.raises(InvalidJob) as mode:
        RunRequest(task="score", mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidJob) as run_id:
        RunRequest(task="score", run_id="a b")
    with pytest.raises(InvalidJob) as env:
        RunRequest(task="score", environment={"x": 1})  # type: ignore[dict-item]
    assert (mode.value.field, run_id.value.field, env.value.field) == ("mode", "run_id", "environment")


async def test_preview_writes_nothing(engine: Engine, clock: ManualClock) -> None:
    await engine.runs.start(RunRequest(task="score", items=tuple(range(10)), segment_size=5))
    jobs = await claim(engine)
    await complete(engine, jobs[:1])
    before = await table_counts(engine.settings)
    assert before["runs"] == 1 and before["run_cursor_moves"] == 1
    preview = await engine.runs.preview(RunRequest(task="score", items=tuple(range(30)), mode=RunMode.INCREMENTAL))
    assert (len(preview.plan.todo), preview.plan.done, preview.cursor) == (25, 5, None)
    assert preview.sample[:3] == (5, 6, 7)
    assert await table_counts(engine.settings) == before


async def test_a_second_incremental_run_of_a_stream_is_refused_while_the_first_is_unfinished(engine: Engine) -> None:
    first = RunRequest(task="score", items=tuple(range(10)), segment_size=5, mode=RunMode.INCREMENTAL)
    run = await engine.runs.start(first)
    grown = RunRequest(task="score", items=tuple(range(15)), segment_size=5, mode=RunMode.INCREMENTAL)
    with pytest.raises(IllegalState, match=f"incremental run {run.id} queued"):
        await engine.runs.start(grown)
    jobs = await claim(engine)
    await complete(engine, jobs[:1])
    with pytest.raises(IllegalState, match=f"incremental run {run.id} running"):
        await engine.runs.start(grown)
    # Other streams, and runs that move no cursor or take every item anyway, are not held up.
    other = await engine.runs.start(RunRequest(task="score", items=(1,), source="b", mode=RunMode.INCREMENTAL))
    simulate = await engine.runs.start(RunRequest(task="score", items=(1,), mode=RunMode.SIMULATE))
    full = await engine.runs.start(RunRequest(task="other", items=(1,)))
    assert len({other.id, simulate.id, full.id, run.id}) == 4
    assert (await engine.runs.get(other.id)).mode == "incremental"
    await complete(engine, [j for j in await claim(engine)] + jobs[1:])
    assert (await engine.runs.get(run.id)).state is RunState.COMPLETED
    assert await cursor(engine, first) == 9
    second = await engine.runs.start(grown)  # the first ended: the second takes only what it left
    assert second.items == 5
    assert sorted(await complete(engine, await claim(engine))) == [10, 11, 12, 13, 14]
    assert await cursor(engine, grown) == 14


async def test_an_ended_incremental_run_frees_its_stream_and_a_replay_never_holds_it(engine: Engine) -> None:
    request = RunRequest(task="score", items=(1, 2, 3), segment_size=1, mode=RunMode.INCREMENTAL)
    run = await engine.runs.start(request)
    await engine.runs.cancel(run.id)
    again = await engine.runs.start(request)
    assert again.items == 3
    replay = await engine.runs.replay(run.id)  # moves no cursor: runs beside the incremental one
    assert (replay.parent_id, replay.mode) == (run.id, "incremental")
    await complete(engine, await claim(engine))
    assert await cursor(engine, request) == 3


async def test_incremental_runs_started_at_once_make_one_run(engine: Engine) -> None:
    requests = [
        RunRequest(task="score", items=tuple(range(n + 5)), segment_size=5, mode=RunMode.INCREMENTAL) for n in range(6)
    ]
    outcomes = await asyncio.gather(*(engine.runs.start(r) for r in requests), return_exceptions=True)
    started = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(started) == 1, outcomes
    assert all(isinstance(o, IllegalState) and "already has" in str(o) for o in refused), refused
    runs = await engine.runs.list(RunFilter(tenant="default", mode="incremental"))
    assert [r.id for r in runs] == [started[0].id]  # type: ignore[union-attr]


async def test_runs_filter_by_mode(engine: Engine) -> None:
    made = {m: (await engine.runs.start(RunRequest(task="score", items=(1,), mode=m))).id for m in RunMode}
    assert len(await engine.runs.list(RunFilter(tenant="default"))) == 3
    for mode, run_id in made.items():
        assert [(r.id, r.mode) for r in await engine.runs.list(RunFilter(mode=mode.value))] == [(run_id, mode.value)]
