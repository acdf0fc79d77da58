"""Graph metrics on ``/metrics``, on SQLite and PostgreSQL: graphs by state (every tenant), graphs that
ended by outcome and their durations, each moving as graphs are submitted, run, fail and are cancelled."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobengine import JobContext, NonRetryable
from jobengine.core.graphs import GraphState
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings

TIMEOUT = 60.0


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    database = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "jobs.db")
    async with Engine.from_settings(Settings(database=database, poll_interval=0.05, claim_max_wait=0.5)) as e:
        yield e


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one series in Prometheus text (0 when absent)."""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{re.escape(name)}{re.escape('{' + inner + '}') if inner else ''} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_graph_metrics_appear_and_change(engine: Engine) -> None:
    started = asyncio.Event()

    @engine.task
    async def number(n: int) -> int:
        return n

    @engine.task(max_attempts=1)
    async def boom() -> None:
        raise NonRetryable("boom")

    @engine.task
    async def slow(ctx: JobContext) -> None:
        started.set()
        for _ in range(int(TIMEOUT / 0.05)):
            ctx.raise_if_cancelled()
            await asyncio.sleep(0.05)

    keys = {t: (await engine.keys.create(t, ["graph:read", "graph:write", "metrics"]))[1] for t in ("acme", "globex")}
    app = create_app(engine, engine.settings)

    def client(tenant: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {keys[tenant]}"}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", headers=headers)

    async with client("acme") as acme, client("globex") as globex:

        async def scrape() -> str:
            r = await acme.get("/metrics")
            assert r.status_code == 200, r.text
            return r.text

        async def until(graph_id: str, http: httpx.AsyncClient, *states: str) -> None:
            for _ in range(int(TIMEOUT / 0.05)):
                if (await http.get(f"/api/v1/graphs/{graph_id}")).json()["state"] in states:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"graph {graph_id} never reached {states}")

        before = await scrape()
        for state in GraphState:  # every state is a series from the start
            assert f'jobengine_graphs{{state="{state.value}"}} 0.0' in before, before

        nodes = [
            {"name": "a", "task": "number", "payload": {"n": 1}},
            {"name": "b", "task": "number", "payload": {"n": 2}},
        ]
        ok = {"nodes": nodes, "edges": [["a", "b"]]}

        async def submit(http: httpx.AsyncClient, body: dict[str, object]) -> dict[str, str]:
            r = await http.post("/api/v1/graphs", json=body)
            assert r.status_code == 201, r.text
            return r.json()  # type: ignore[no-any-return]

        first = await submit(acme, ok)
        second = await submit(globex, ok)  # counted across tenants
        failing = await submit(acme, {"nodes": [{"name": "x", "task": "boom"}]})
        slow_one = await submit(acme, {"nodes": [{"name": "s", "task": "slow"}]})
        pending = await scrape()
        assert sample(pending, "jobengine_graphs", state="pending") == 4

        worker = engine.worker(concurrency=4, poll_interval=0.05, heartbeat_every=0.2)
        running = asyncio.create_task(worker.run())
        try:
            await until(first["id"], acme, "succeeded")
            await until(second["id"], globex, "succeeded")
            await until(failing["id"], acme, "failed")
            await asyncio.wait_for(started.wait(), TIMEOUT)
            await until(slow_one["id"], acme, "running")
            mid = await scrape()
            assert sample(mid, "jobengine_graphs", state="running") == 1
            assert sample(mid, "jobengine_graphs", state="succeeded") == 2
            assert sample(mid, "jobengine_graphs", state="failed") == 1
            assert sample(mid, "jobengine_graphs", state="pending") == 0

            assert (await acme.post(f"/api/v1/graphs/{slow_one['id']}/cancel")).status_code == 200
            await until(slow_one["id"], acme, "cancelled")
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT)

        after = await scrape()
    assert sample(after, "jobengine_graphs", state="running") == 0
    assert sample(after, "jobengine_graphs", state="cancelled") == 1
    outcomes = {o: sample(after, "jobengine_graph_outcomes_total", outcome=o) for o in ("succeeded", "failed",
                                                                                      "cancelled")}  # fmt: skip
    assert outcomes == {"succeeded": 2, "failed": 1, "cancelled": 1}
    assert sample(after, "jobengine_graph_duration_seconds_count", outcome="succeeded") == 2
    assert sample(after, "jobengine_graph_duration_seconds_sum", outcome="succeeded") > 0
    assert sample(after, "jobengine_graph_duration_seconds_bucket", outcome="succeeded", le="+Inf") == 2
