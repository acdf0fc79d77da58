"""The HTTP API on PostgreSQL: keys, tenant scoping, Idempotency-Key, the worker protocol's filtered
claims, queue pause and the dead-letter, through the same routes as on SQLite."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx

from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings


async def test_the_api_on_postgres(postgres_dsn: str) -> None:
    settings = Settings(database=postgres_dsn, claim_max_wait=0.5)
    engine = Engine.from_settings(settings)
    async with engine:
        keys = {t: (await engine.keys.create(t, ["admin"]))[1] for t in ("acme", "globex")}
        app = create_app(engine, settings)

        def client(tenant: str) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {keys[tenant]}"}
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pg", headers=headers)

        async with client("acme") as acme, client("globex") as globex:
            body = {"task": "a", "payload": {"n": 1}}
            answers = await asyncio.gather(
                *(acme.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": "once"}) for _ in range(20))
            )
            assert set(Counter(r.status_code for r in answers)) <= {201, 409}
            assert len({r.json()["id"] for r in answers if r.status_code == 201}) == 1
            theirs = (await globex.post("/api/v1/jobs", json={"task": "a"})).json()
            assert (await acme.get(f"/api/v1/jobs/{theirs['id']}")).status_code == 404
            await acme.post("/api/v1/jobs/batch", json={"jobs": [{"task": "b"}, {"task": "a", "queue": "q2"}]})
            await acme.post("/api/v1/queues/q2/pause")
            claim = {"worker_id": "w", "queues": ["default", "q2"], "tasks": ["a"], "limit": 10}
            got = (await acme.post("/api/v1/worker/claim", json=claim)).json()["jobs"]
            assert [(e["job"]["task"], e["job"]["queue"], e["job"]["tenant"]) for e in got] == [
                ("a", "default", "acme")
            ]
            entry = got[0]
            fail = {"token": entry["lease"]["token"], "error": {"type": "E", "message": "m"}, "retryable": False}
            assert (await acme.post(f"/api/v1/worker/jobs/{entry['job']['id']}/fail", json=fail)).status_code == 200
            assert (await acme.post(f"/api/v1/worker/jobs/{entry['job']['id']}/fail", json=fail)).status_code == 409
            dead = (await acme.get("/api/v1/dead-letter")).json()["items"]
            assert [j["id"] for j in dead] == [entry["job"]["id"]]
            assert (await acme.post("/api/v1/dead-letter/purge", json={})).json() == {"purged": 1}
            events = (await acme.get("/api/v1/events", params={"limit": 1000})).json()["items"]
            assert events[-1]["type"] == "job.deleted" and {e["tenant"] for e in events} == {"acme"}
            assert (await acme.get("/readyz")).status_code == 200
