"""Simulate runs and replays on SQLite and PostgreSQL, with a real worker: a simulate run's jobs see
``ctx.mode == "simulate"``, its diff against the last full run names exactly the items whose result
changed, it sends no webhook and moves no cursor; a replay is a new run over the same items."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobengine.core.run_requests import RunMode, RunRequest
from jobengine.core.runs import Run, RunState
from jobengine.engine import Engine
from jobengine.errors import IllegalState, NotFound
from jobengine.secretbox import new_key
from jobengine.webhooks.dispatcher import WebhookDispatcher
from jobengine.worker import JobContext
from tests.support import simulations

from .conftest import settings_for

pytestmark = pytest.mark.timeout(300)

#: The items whose score the "new version" changes (the task reads it at run time).
CHANGED = frozenset(simulations.CHANGED)
NEW_VERSION = {"on": False}
#: The ``ctx.mode`` each job of the test saw.
SEEN_MODES: list[str] = []


@pytest.fixture(params=["sqlite", "postgres"])
async def live(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    settings = settings_for(request.param, request, tmp_path, poll_interval=0.05,
                            webhook_allow_hosts=("127.0.0.1/32",), secret_keys=(new_key(),))  # fmt: skip
    async with Engine.from_settings(settings) as engine:
        SEEN_MODES.clear()

        @engine.task
        async def score(ctx: JobContext, items: list[int], **_: Any) -> list[int]:
            SEEN_MODES.append(ctx.mode)
            return [i * 2 + (1 if NEW_VERSION["on"] and i in CHANGED else 0) for i in items]

        yield engine
    NEW_VERSION["on"] = False


async def run_to_end(engine: Engine, request: RunRequest | None = None, *, replay: str | None = None) -> Run:
    """Start ``request`` (or replay run ``replay``), run a worker until the run ended; the run then."""
    run = await engine.runs.start(request) if request is not None else await engine.runs.replay(replay or "")
    return await simulations.run_to_end(engine, run)


async def cursor(engine: Engine, request: RunRequest) -> Any:
    found = await engine.store.scheduling().get_cursor("default", request.stream)
    return None if found is None else found.value


async def test_a_simulate_run_diffs_exactly_the_changed_items_sends_no_webhook(live: Engine) -> None:
    hooks = WebhookDispatcher(live)
    endpoint = await live.webhooks.create_endpoint("default", "http://127.0.0.1:9/hook")
    full = simulations.full_request("score", version="v1")
    base = await run_to_end(live, full)
    assert base.state is RunState.COMPLETED and await cursor(live, full) == 999
    assert await hooks.fan_out() > 0  # a full run's events reach the endpoint
    before = len(await live.webhooks.list_deliveries("default", endpoint.id, limit=1000))

    NEW_VERSION["on"] = True
    simulate = simulations.simulate_request("score", version="v2")
    sim = await run_to_end(live, simulate)
    assert sim.state is RunState.COMPLETED and sim.items == 1000
    assert SEEN_MODES == ["full"] * 10 + ["simulate"] * 10
    assert await cursor(live, simulate) == 999  # moved by the full run only
    await hooks.fan_out()
    assert len(await live.webhooks.list_deliveries("default", endpoint.id, limit=1000)) == before

    diff = await live.runs.diff(sim.id)
    simulations.check_diff(diff, base)
    assert len(diff.to_json()["entries"]) == 10


async def test_a_diff_shows_new_and_gone_items_and_refuses_other_runs(live: Engine) -> None:
    full = RunRequest(task="score", items=(1, 2, 3), version="v1")
    base = await run_to_end(live, full)
    with pytest.raises(IllegalState, match="not a simulate run"):
        await live.runs.diff(base.id)
    with pytest.raises(NotFound):
        await live.runs.diff("no-such-run")
    sim = await run_to_end(live, RunRequest(task="score", items=(2, 3, 4), mode=RunMode.SIMULATE))
    diff = await live.runs.diff(sim.id)
    assert [(e.item, e.change.value) for e in diff.entries] == [(1, "gone"), (2, "same"), (3, "same"), (4, "new")]
    pending = await live.runs.start(RunRequest(task="score", items=(5,), mode=RunMode.SIMULATE))
    with pytest.raises(IllegalState, match="once it ended"):
        await live.runs.diff(pending.id)


async def test_a_replay_is_a_new_run_over_the_same_items(live: Engine) -> None:
    incremental = RunRequest(task="score", items=tuple(range(50)), segment_size=20, version="v3",
                             mode=RunMode.INCREMENTAL, environment={"region": "eu"})  # fmt: skip
    first = await run_to_end(live, incremental)
    assert await cursor(live, incremental) == 49
    with pytest.raises(IllegalState, match="only an ended run"):
        await live.runs.replay((await live.runs.start(RunRequest(task="other", items=(1,)))).id)
    again = await run_to_end(live, replay=first.id)
    assert again.id != first.id and again.parent_id == first.id
    assert (again.state, again.items, again.summary.total) == (RunState.COMPLETED, 50, 3)
    jobs = await live.runs.jobs(again.id)
    assert sorted(i for j in jobs for i in j.payload["items"]) == list(range(50))
    assert {j.payload["version"] for j in jobs} == {"v3"}
    assert {j.payload["environment"]["region"] for j in jobs} == {"eu"}
    assert await cursor(live, incremental) == 49
