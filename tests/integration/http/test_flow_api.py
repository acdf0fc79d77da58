"""Flow control over the HTTP API: backpressure (soft header, 429 past the hard limit, nothing written),
load shedding (503 for low priority while saturated, high priority still taken), the flow resource,
scale metrics in the API and in /metrics, and the typed error of the Python enqueue."""

from __future__ import annotations

import pytest

from jobengine.core.ids import WorkerId
from jobengine.core.models import Completion
from jobengine.errors import Overloaded, QueueFull

from .conftest import MakeApi

PROBLEM = "application/problem+json"


async def test_backpressure_soft_then_hard_limit_writes_nothing(make_api: MakeApi) -> None:
    async with make_api(flow_cache_seconds=0.0) as api, api.client() as http:
        r = await http.put("/api/v1/queues/mail/flow", json={"soft_limit": 2, "hard_limit": 4})
        assert r.status_code == 200, r.text
        assert r.json()["limits"]["hard_limit"] == 4
        for _ in range(2):
            r = await http.post("/api/v1/jobs", json={"task": "send", "queue": "mail"})
            assert r.status_code == 201 and r.headers["x-queue-pressure"] == "none"
            assert "queue_pressure" not in r.json()  # the job's own body when there is no pressure
        r = await http.post("/api/v1/jobs", json={"task": "send", "queue": "mail"})
        assert r.status_code == 201
        assert r.headers["x-queue-pressure"] == "soft" and r.json()["queue_pressure"] == "soft"
        r = await http.post("/api/v1/jobs", json={"task": "send", "queue": "mail"})
        assert r.status_code == 201 and r.headers["x-queue-pressure"] == "hard"  # accepted; the queue is full now
        r = await http.post("/api/v1/jobs", json={"task": "send", "queue": "mail"})
        assert r.status_code == 429 and r.headers["content-type"] == PROBLEM
        assert int(r.headers["retry-after"]) >= 1
        body = r.json()
        assert body["field"] == "queue" and body["type"] == "urn:jobengine:problem:queue-full"
        r = await http.post("/api/v1/jobs/batch", json={"jobs": [{"task": "send", "queue": "other"},
                                                                 {"task": "send", "queue": "mail"}]})  # fmt: skip
        assert r.status_code == 429
        page = (await http.get("/api/v1/jobs", params={"limit": 100})).json()
        assert [j["queue"] for j in page["items"]] == ["mail"] * 4  # the refused requests wrote nothing
        r = await http.get("/metrics")
        assert 'jobengine_flow_refused_total{queue="mail",reason="hard_limit"} 2.0' in r.text
        assert 'jobengine_flow_pressure{queue="mail"} 2.0' in r.text
        with pytest.raises(QueueFull) as info:  # the Python enqueue: a typed error
            await api.engine.enqueue("send", queue="mail", tenant="acme")
        assert info.value.queue == "mail" and info.value.hard_limit == 4


async def test_flow_limits_are_validated_field_by_field(make_api: MakeApi) -> None:
    async with make_api() as api, api.client() as http:
        for body, field in (({"rate": -1}, "rate"), ({"concurrency": 2}, "concurrency_key"),
                            ({"soft_limit": 9, "hard_limit": 3}, "soft_limit"), ({"speed": 1}, "speed"),
                            ({"concurrency": 1, "concurrency_key": "payload.a b"}, "concurrency_key")):  # fmt: skip
            r = await http.put("/api/v1/queues/q/flow", json=body)
            assert r.status_code == 422 and r.headers["content-type"] == PROBLEM, body
            assert r.json()["field"] == field, r.json()
        assert (await http.get("/api/v1/queues/q/flow")).json()["limits"] is None  # nothing was written
        r = await http.put("/api/v1/queues/q/flow", json={"rate": 5, "concurrency": 2, "concurrency_key": "tenant"})
        assert r.status_code == 200 and r.json()["current_rate"] == 5
        r = await http.put(
            "/api/v1/queues/a/flow", json={"rate": 4, "adaptive": True, "rate_floor": 1, "rate_ceiling": 8}
        )
        assert r.status_code == 200 and r.json()["current_rate"] == 4
        await api.engine.transitions.fetch_jobs(["a"], 10, WorkerId("w"), 30.0)  # a claim starts the adaptive limiter
        metrics = (await http.get("/metrics")).text
        assert 'jobengine_flow_adaptive_rate{queue="a"} 4.0' in metrics
        assert 'jobengine_flow_rate_limit{queue="q"} 5.0' in metrics
        r = await http.delete("/api/v1/queues/q/flow")
        assert r.status_code == 200 and r.json()["limits"] is None


async def test_saturated_service_sheds_low_priority_and_keeps_high(make_api: MakeApi) -> None:
    settings = {"flow_cache_seconds": 0.0, "shed_depth": 3, "shed_min_priority": 5, "flow_retry_after": 7.0}
    async with make_api(**settings) as api, api.client() as http:
        for _ in range(3):
            r = await http.post("/api/v1/jobs", json={"task": "t", "queue": "a"})
            assert r.status_code == 201
        r = await http.post("/api/v1/jobs", json={"task": "t", "queue": "b", "priority": 1})
        assert r.status_code == 503 and r.headers["retry-after"] == "7"
        assert r.json()["field"] == "priority" and r.json()["type"] == "urn:jobengine:problem:overloaded"
        r = await http.post("/api/v1/jobs", json={"task": "t", "queue": "b", "priority": 5})
        assert r.status_code == 201  # the headroom kept for higher priorities
        load = (await http.get("/api/v1/load")).json()
        assert load["state"] == "saturated" and load["reasons"] == ["depth"]
        metrics = (await http.get("/metrics")).text
        assert 'jobengine_load_saturated{reason="depth"} 1.0' in metrics
        assert 'jobengine_load_threshold{signal="min_priority"} 5.0' in metrics
        with pytest.raises(Overloaded):
            await api.engine.enqueue("t", queue="b", tenant="acme")
        # Drain below the threshold: low priority is accepted again.
        jobs = await api.engine.transitions.fetch_jobs(["a", "b"], 10, WorkerId("w"), 30.0)
        await api.engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "", None) for j in jobs])
        r = await http.post("/api/v1/jobs", json={"task": "t", "queue": "b", "priority": 0})
        assert r.status_code == 201


async def test_scale_report_in_api_and_metrics(make_api: MakeApi) -> None:
    async with make_api(scale_target_seconds=10.0) as api, api.client() as http:
        engine = api.engine
        for _ in range(30):
            await engine.enqueue("t", queue="s", tenant="acme")
        jobs = await engine.transitions.fetch_jobs(["s"], 10, WorkerId("w"), 30.0)
        await engine.transitions.complete_jobs([Completion(j.id, j.lease_token or "", None) for j in jobs])
        r = await http.get("/api/v1/queues/s/scale")
        assert r.status_code == 200, r.text
        s = r.json()
        assert s["depth"] == 20 and s["running"] == 0 and s["throughput"] == pytest.approx(10 / 60)
        assert s["recommended_workers"] >= 1 and s["target_seconds"] == 10
        metrics = (await http.get("/metrics")).text
        assert 'jobengine_flow_queue_depth{queue="s"} 20.0' in metrics
        assert 'jobengine_flow_recommended_workers{queue="s"}' in metrics
        assert 'jobengine_flow_wait_seconds{quantile="0.95",queue="s"}' in metrics


async def test_flow_depth_is_the_tenants_own_and_every_tenants_for_metrics(make_api: MakeApi) -> None:
    async with make_api(flow_cache_seconds=0.0) as api:
        for tenant, n in (("acme", 2), ("globex", 3)):
            for _ in range(n):
                await api.engine.enqueue("t", queue="shared", tenant=tenant)
        jobs = await api.engine.transitions.fetch_jobs(["shared"], 1, WorkerId("w"), 30.0)  # running: not depth
        assert len(jobs) == 1 and jobs[0].tenant == "acme"
        seen: dict[str, int] = {}
        for tenant in ("acme", "globex"):
            async with api.client(await api.key(tenant, "jobs:read"), tenant) as http:
                r = await http.get("/api/v1/queues/shared/flow")
                assert r.status_code == 200, r.text
                seen[tenant] = r.json()["depth"]
                assert (await http.get("/api/v1/queues/other/flow")).json()["depth"] == 0
        assert seen == {"acme": 1, "globex": 3}  # neither learns how much the other has queued
        async with api.client(await api.key("acme", "jobs:read", "metrics")) as http:
            assert (await http.get("/api/v1/queues/shared/flow")).json()["depth"] == 4  # the operator's view
        async with api.client(tenant="globex") as http:  # admin implies metrics
            assert (await http.get("/api/v1/queues/shared/flow")).json()["depth"] == 4
        async with api.client(await api.key("globex", "queues:write"), "globex") as http:
            r = await http.put("/api/v1/queues/shared/flow", json={"soft_limit": 3})
            assert r.status_code == 200 and r.json()["depth"] == 3
            # The pressure is the queue's admission state, which an enqueue of this tenant reports anyway.
            assert r.json()["pressure"] == "soft"
