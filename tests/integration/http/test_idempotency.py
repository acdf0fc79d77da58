"""Idempotency-Key on POST: the same key and body get the first answer; a duplicate in flight gets 409; the
same key with another body 422; keys are per tenant; a refused request does not use the key up."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from jobengine.http.server import ApiService

from .conftest import Api


async def test_fifty_concurrent_identical_posts_create_one_job(api: Api) -> None:
    """Over real connections to a real server, all at once."""
    service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
    await service.start()
    try:
        headers = {"Authorization": f"Bearer {api.keys['acme']}", "Idempotency-Key": "checkout-42"}
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=service.url, headers=headers, limits=limits, timeout=30) as c:
            body = {"task": "charge", "payload": {"order": 42, "cents": 1999}}
            responses = await asyncio.gather(*(c.post("/api/v1/jobs", json=body) for _ in range(50)))
    finally:
        await service.stop()
    statuses = Counter(r.status_code for r in responses)
    assert set(statuses) <= {201, 409}, statuses
    created = [r for r in responses if r.status_code == 201]
    assert created and len({r.json()["id"] for r in created}) == 1
    for r in responses:
        if r.status_code == 409:
            assert r.headers["retry-after"] == "1" and r.json()["field"] == "Idempotency-Key"
    assert sum((await api.engine.count_jobs()).values()) == 1
    print(f"\n50 concurrent POSTs with one Idempotency-Key: {dict(statuses)}, 1 job created")


async def test_a_retry_gets_the_first_answer_and_another_body_is_refused(api: Api) -> None:
    async with api.client() as acme, api.client(tenant="globex") as globex:
        key = {"Idempotency-Key": "k-1"}
        first = await acme.post("/api/v1/jobs", json={"task": "t"}, headers=key)
        again = await acme.post("/api/v1/jobs", json={"task": "t"}, headers=key)
        assert (first.status_code, again.status_code) == (201, 201)
        assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
        other = await acme.post("/api/v1/jobs", json={"task": "t2"}, headers=key)
        assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
        elsewhere = await acme.post("/api/v1/jobs/batch", json={"jobs": [{"task": "t"}]}, headers=key)
        assert elsewhere.status_code == 422  # same key, another path: another request
        theirs = await globex.post("/api/v1/jobs", json={"task": "t"}, headers=key)
        assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]  # keys are per tenant
    assert sum((await api.engine.count_jobs()).values()) == 2


async def test_a_refused_request_does_not_use_the_key_up(api: Api) -> None:
    async with api.client() as acme:
        key = {"Idempotency-Key": "k-2"}
        bad = await acme.post("/api/v1/jobs", json={"task": "t", "priority": "high"}, headers=key)
        assert bad.status_code == 422
        good = await acme.post("/api/v1/jobs", json={"task": "t", "priority": 1}, headers=key)
        assert good.status_code == 201
        assert (await acme.post("/api/v1/jobs", json={"task": "t", "priority": 1}, headers=key)).json() == good.json()


async def test_a_duplicate_while_the_first_is_in_flight_gets_409(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()
    enqueue_for = api.engine.enqueue_for

    async def slow(*args: object, **kwargs: object) -> object:
        entered.set()
        await gate.wait()
        return await enqueue_for(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api.engine, "enqueue_for", slow)
    async with api.client() as acme:
        key = {"Idempotency-Key": "k-3"}
        first = asyncio.create_task(acme.post("/api/v1/jobs", json={"task": "t"}, headers=key))
        await entered.wait()
        dup = await acme.post("/api/v1/jobs", json={"task": "t"}, headers=key)
        assert dup.status_code == 409 and dup.headers["retry-after"] == "1"
        gate.set()
        assert (await first).status_code == 201
        assert (await acme.post("/api/v1/jobs", json={"task": "t"}, headers=key)).json() == (await first).json()


async def test_a_malformed_key_is_422(api: Api) -> None:
    async with api.client() as acme:
        r = await acme.post("/api/v1/jobs", json={"task": "t"}, headers={"Idempotency-Key": "x" * 300})
        assert r.status_code == 422 and r.json()["field"] == "Idempotency-Key"
