"""Run requests over HTTP on SQLite and PostgreSQL: ``POST /api/v1/runs/preview`` leaves every table's row
count unchanged, one run id sent many times at once makes one run, and an overlapping incremental run is a
409 problem naming the unfinished one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings
from tests.support.tables import table_counts

R = "/api/v1/runs"


@pytest.fixture(params=["sqlite", "postgres"])
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    """An engine on a fresh database of each backend and a client of its API with an admin key of ``acme``."""
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "runs.db")
    settings = Settings(database=dsn, claim_max_wait=0.5)
    async with Engine.from_settings(settings) as engine:
        key = (await engine.keys.create("acme", ["admin"]))[1]
        transport = httpx.ASGITransport(app=create_app(engine, settings))
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as client:
            yield engine, client


async def test_a_preview_leaves_every_table_as_it_was(pair: tuple[Engine, httpx.AsyncClient]) -> None:
    engine, acme = pair
    # Some of everything a preview reads: a cursor, a run with a finished segment, a schedule.
    assert (await acme.post(R, json={"task": "score", "items": list(range(10)), "segment_size": 5})).status_code == 201
    jobs = await engine.transitions.fetch_jobs(["default"], 10, WorkerId("w"), 300)
    await engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "") for j in jobs])
    body = {"task": "score", "items": list(range(20)), "segment_size": 5, "mode": "incremental"}
    assert (await acme.post(R, json=body)).status_code == 201
    jobs = await engine.transitions.fetch_jobs(["default"], 1, WorkerId("w"), 300)
    await engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "") for j in jobs])
    schedule = {"name": "fan", "every": 60, "template": {"task": "t", "items": [1, 2]}}
    assert (await acme.post("/api/v1/schedules", json=schedule)).status_code == 201
    await acme.get(R)  # the key's first use is behind us
    before = await table_counts(engine.settings)
    assert before["runs"] == 2 and before["run_cursors"] == 1 and before["jobs"] == 4

    previews = [
        {"task": "score", "items": list(range(30)), "mode": "incremental", "segment_size": 5},
        {"task": "score", "items": list(range(30)), "mode": "full", "run_id": "later-1"},
        {"task": "score", "items": list(range(30)), "mode": "simulate"},
        {"schedule": "fan", "count": 3},
    ]
    answers = [await acme.post(f"{R}/preview", json=b) for b in previews]
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    incremental = answers[0].json()
    counts = (incremental["todo"], incremental["before_cursor"], incremental["done"], incremental["cursor"]["value"])
    assert counts == (15, 10, 5, 9)  # the unfinished incremental run's finished segment counts as done
    assert len(answers[3].json()["fire_times"]) == 3
    assert await table_counts(engine.settings) == before


async def test_one_run_id_sent_at_once_makes_one_run(pair: tuple[Engine, httpx.AsyncClient]) -> None:
    engine, acme = pair
    body = {"task": "score", "items": list(range(50)), "segment_size": 10, "run_id": "nightly-7"}
    answers = await asyncio.gather(*(acme.post(R, json=body) for _ in range(8)))
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert {a.json()["id"] for a in answers} == {"nightly-7"}
    assert [r["id"] for r in (await acme.get(R)).json()["items"]] == ["nightly-7"]
    assert len(await engine.transitions.fetch_jobs(["default"], 100, WorkerId("w"), 300)) == 5


async def test_an_overlapping_incremental_run_is_a_409(pair: tuple[Engine, httpx.AsyncClient]) -> None:
    _, acme = pair
    body = {"task": "score", "items": [1, 2, 3], "mode": "incremental", "source": "accounts"}
    first = (await acme.post(R, json=body)).json()
    assert first["mode"] == "incremental"
    refused = await acme.post(R, json={**body, "items": [1, 2, 3, 4]})
    assert refused.status_code == 409, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert first["id"] in refused.json()["detail"]
    again = await acme.post(R, json={**body, "run_id": None})  # the same request without an id: refused too
    assert again.status_code == 409
    listed = (await acme.get(R, params={"mode": "incremental"})).json()["items"]
    assert [(r["id"], r["mode"]) for r in listed] == [(first["id"], "incremental")]
    assert (await acme.get(R, params={"mode": "simulate"})).json()["items"] == []
    assert (await acme.get(R, params={"mode": "sometimes"})).status_code == 422
    stream = (await acme.get(R, params={"schedule_id": "score accounts"})).json()["items"]
    assert [r["id"] for r in stream] == [first["id"]]  # a stream's runs, by its schedule_id
    assert (await acme.get(R, params={"schedule_id": "a b c"})).status_code == 422
