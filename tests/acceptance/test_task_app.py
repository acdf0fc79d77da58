"""A user's app of three tasks (async, sync, three phases) written with task handles: a worker process runs
it (``jobengine worker --app``) and a producer process enqueues through the handles and gets each task's
return value back, with the app unchanged on SQLite, PostgreSQL, Redis and NATS: only the configuration
(``JOBENGINE_*`` variables, or ``./jobengine.yaml`` for the NATS streams) differs."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.core.locations import describe_transport
from support.fleet import Fleet, fleet_for

APP = """
from pydantic import BaseModel

from jobengine import Engine, JobContext, Settings, SyncJobContext

engine = Engine.from_settings(Settings.load())  # the store and transport: configuration only


class Customer(BaseModel):
    email: str
    name: str


@engine.task(queue="mail", max_attempts=5)
async def send_welcome(ctx: JobContext, customer: Customer, lang: str = "en") -> str:
    ctx.progress(0.5, "rendering")
    return f"[{lang}] welcome {customer.name} <{customer.email}> (attempt {ctx.attempt})"


@engine.task
def resize(ctx: SyncJobContext, path: str, width: int = 100) -> dict[str, object]:
    ctx.save_checkpoint({"path": path})  # a sync task's checkpoint: stored before this returns
    return {"path": path, "width": width, "thread": True}


async def extract(source: str) -> dict[str, object]:
    return {"source": source, "rows": len(source)}


def transform(ctx: SyncJobContext, factor: int = 2) -> int:
    return ctx.results["extract"]["rows"] * factor


async def load(ctx: JobContext) -> str:
    await ctx.save_checkpoint({"loading": ctx.results["transform"]})
    return f"loaded {ctx.results['transform']} rows"


etl = engine.add_task("etl", phases=[extract, transform, load])
"""

PRODUCER = """
import asyncio, json

from jobengine import JobFailed
from shop import Customer, engine, etl, resize, send_welcome


async def main() -> None:
    async with engine:
        ada = await send_welcome.enqueue(Customer(email="ada@example.com", name="Ada"), lang="fr")
        small = await resize.options(priority=5).enqueue("/img/cat.png", width=64)
        day = await etl.options(depends_on=[small]).enqueue(source="s3://bucket/day", factor=3)
        results = {
            "welcome": await ada.result(timeout=120),
            "resize": await small.result(timeout=120),
            "etl": await day.result(timeout=120),
            "payloads": [ada.job.payload, small.job.payload, day.job.payload],
        }
        try:
            await send_welcome.enqueue({"email": "no name"})
        except ValueError as exc:
            results["refused"] = str(exc)
        print(json.dumps(results))


asyncio.run(main())
"""


@pytest.fixture(params=["sqlite", "postgres", "redis", "nats"])
async def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Fleet]:
    """Processes on the store and transport named by the parameter (Redis and NATS over a PostgreSQL store),
    running in ``tmp_path`` where the app and the producer are written."""
    async with fleet_for(request.param, request, tmp_path, {}) as f:
        yield f


@pytest.mark.slow
async def test_a_three_task_app_returns_each_result_through_its_handle(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(APP)
    (tmp_path / "produce.py").write_text(PRODUCER)
    procs = fleet.procs
    env = {"PYTHONPATH": f"{tmp_path}:{procs.env['PYTHONPATH']}"}
    worker = procs.spawn("worker", "worker", "--app", "shop:engine", "--concurrency", "4", env=env)
    procs.wait_output(worker, "started on queues", 120)
    # The worker says it runs on the configured transport: the app named none.
    assert f"transport    {describe_transport(fleet.settings.queue)}" in procs.output(worker), procs.output(worker)
    producer = procs.run("producer", [sys.executable, str(tmp_path / "produce.py")], env=env)
    assert producer.wait(timeout=240) == 0, procs.output(producer)
    out = json.loads(procs.output(producer).strip().splitlines()[-1])
    assert out["welcome"] == "[fr] welcome Ada <ada@example.com> (attempt 1)"
    assert out["resize"] == {"path": "/img/cat.png", "width": 64, "thread": True}
    assert out["etl"] == {
        "extract": {"source": "s3://bucket/day", "rows": 15},
        "transform": 45,
        "load": "loaded 45 rows",
    }
    assert out["payloads"] == [  # one JSON object by parameter name: what another language would write
        {"customer": {"email": "ada@example.com", "name": "Ada"}, "lang": "fr"},
        {"path": "/img/cat.png", "width": 64},
        {"source": "s3://bucket/day", "factor": 3},
    ]
    assert "customer" in out["refused"] and "name" in out["refused"]
