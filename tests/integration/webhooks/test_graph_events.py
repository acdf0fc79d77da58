"""Graph completion webhooks: an endpoint subscribed to ``graph.completed`` and ``graph.failed`` receives one
signed delivery when a graph ends (a graph submitted, or fired by a schedule), and nothing for another
tenant's graph, on a real loopback receiver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from standardwebhooks.webhooks import Webhook

from jobengine.core.graph_template import GraphTemplate
from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, Completion, FailOutcome, Failure
from jobengine.core.schedules import ScheduleSpec
from jobengine.engine import Engine
from jobengine.engine.canvas import TaskCall, chain
from tests.integration.webhooks.conftest import MakeEngine, dispatching
from tests.support.waiting import until
from tests.support.webhook_receiver import Answer, Receiver

TIMEOUT = 60.0


async def run_nodes(engine: Engine, *, fail: str | None = None) -> None:
    """Claim and end every claimable node until none is left; the node whose task is ``fail`` ends dead."""
    while jobs := await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w"), 300):
        for job in jobs:
            token = job.lease_token or ""
            if job.task == fail:
                error = AttemptError(job.attempt, engine.clock.now(), "RuntimeError", "boom")
                failure = Failure(job.id, token, error, FailOutcome.DEAD, engine.clock.now())
                await engine.transitions.fail_jobs([failure])
            else:
                await engine.transitions.complete_jobs([Completion(job.id, token, result=job.task)])


async def test_one_delivery_when_a_graph_ends(make_engine: MakeEngine, receiver: Callable[[Answer], Receiver]) -> None:
    rx = receiver(lambda n, r: (200, {}))
    async with make_engine() as engine:
        endpoint = await engine.webhooks.create_endpoint(
            "acme", rx.url, filter={"types": ["graph.completed", "graph.failed"]}
        )
        async with dispatching(engine):
            ok = await engine.graphs.submit(chain(TaskCall("a"), TaskCall("b")), tenant="acme", name="ok")
            await engine.graphs.submit(chain(TaskCall("a"), TaskCall("b")), tenant="globex", name="theirs")
            await run_nodes(engine)
            await until(lambda: len(rx.requests) >= 1)
            template = GraphTemplate.from_json({"name": "nightly", "nodes": [{"name": "x", "task": "x"}]})
            schedule = await engine.schedules.create(
                ScheduleSpec(name="nightly", cron="0 2 * * *", template=template, tenant="acme")
            )
            run = await engine.schedules.trigger(schedule.id, reason="now", tenant="acme")
            await run_nodes(engine, fail="x")
            await until(lambda: len(rx.requests) >= 2)
            await asyncio.sleep(0.5)  # nothing more should come
            assert (await engine.graphs.get(ok.id)).state.value == "succeeded"
        deliveries = await engine.webhooks.list_deliveries("acme", endpoint.id)

    assert len(rx.requests) == 2 and len(deliveries) == 2
    wh = Webhook(endpoint.secret)
    bodies = [wh.verify(r.body, r.headers) for r in rx.requests]  # raises unless the signature verifies
    # The envelope's data is the event; the event's own data says which graph and how it ended.
    got = sorted((b["type"], b["data"]["data"]["graph_id"], b["data"]["data"]["state"]) for b in bodies)
    assert got == sorted([("graph.completed", ok.id, "succeeded"), ("graph.failed", run.id, "failed")])
    assert {b["data"]["tenant"] for b in bodies} == {"acme"}
    names = {json.loads(r.body)["data"]["data"]["name"] for r in rx.requests}
    assert names == {"ok", "nightly"}  # globex's graph is not acme's endpoint's
