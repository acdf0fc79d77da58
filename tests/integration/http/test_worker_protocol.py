"""The worker protocol over HTTP: claim (long-poll, batch, by task), heartbeat (409 once the lease is lost),
phases, complete / fail / release, all fenced by the lease token like in-process workers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from jobengine.core.models import NewJob

from .conftest import Api

W = "/api/v1/worker"


async def claim(c: httpx.AsyncClient, **body: Any) -> list[dict[str, Any]]:
    r = await c.post(f"{W}/claim", json={"worker_id": "w1", **body})
    assert r.status_code == 200, r.text
    return list(r.json()["jobs"])


async def test_claim_heartbeat_phases_complete_and_a_late_report_is_refused(acme: httpx.AsyncClient) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "resize", "payload": {"w": 64}})).json()
    [entry] = await claim(acme, tasks=["resize"], lease_seconds=30.0)
    token, jid = entry["lease"]["token"], job["id"]
    assert entry["job"]["state"] == "running" and entry["job"]["attempt"] == 1 and entry["job"]["payload"] == {"w": 64}
    hb = await acme.post(f"{W}/jobs/{jid}/heartbeat", json={"token": token, "lease_seconds": 60.0})
    assert hb.status_code == 200 and hb.json()["cancel_requested"] is False
    assert hb.json()["lease_expires_at"] > entry["lease"]["expires_at"]
    phases = [
        {"name": "fetch", "state": "succeeded", "progress": 1.0, "result": {"bytes": 10}},
        {"name": "scale", "state": "running", "progress": 0.5, "checkpoint": {"row": 3}},
    ]
    r = await acme.post(f"{W}/jobs/{jid}/phases", json={"token": token, "phases": phases, "event": "phase.progress"})
    assert r.status_code == 200
    stored = (await acme.get(f"/api/v1/jobs/{jid}")).json()
    assert [p["state"] for p in stored["phases"]] == ["succeeded", "running"] and stored["progress"] == 0.75
    assert stored["phases"][1]["checkpoint"] == {"row": 3}
    done = await acme.post(f"{W}/jobs/{jid}/complete", json={"token": token, "result": {"ok": True}})
    assert done.status_code == 200 and done.json()["completed"] == [jid]
    final = (await acme.get(f"/api/v1/jobs/{jid}")).json()
    assert final["state"] == "succeeded" and final["result"] == {"ok": True}
    for path, body in [
        ("complete", {"token": token, "result": 2}),
        ("heartbeat", {"token": token}),
        ("fail", {"token": token, "error": {"type": "E"}}),
        ("release", {"token": token}),
        ("phases", {"token": token, "phases": phases}),
    ]:
        late = await acme.post(f"{W}/jobs/{jid}/{path}", json=body)
        assert late.status_code == 409, (path, late.text)
        assert late.json()["type"] == "urn:jobengine:problem:lease-lost"
    assert (await acme.get(f"/api/v1/jobs/{jid}")).json()["result"] == {"ok": True}


async def test_an_expired_lease_is_rescued_and_the_old_worker_is_fenced_out(api: Api, acme: httpx.AsyncClient) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "slow"})).json()
    [first] = await claim(acme, tasks=["slow"], lease_seconds=1.0)
    await asyncio.sleep(1.1)
    rescued = await api.engine.transitions.rescue_jobs()
    assert [j.id for j in rescued.jobs] == [job["id"]]
    [second] = await claim(acme, worker_id="w2", tasks=["slow"], lease_seconds=30.0)
    assert second["job"]["id"] == job["id"] and second["job"]["attempt"] == 2
    old, new = first["lease"]["token"], second["lease"]["token"]
    assert (await acme.post(f"{W}/jobs/{job['id']}/heartbeat", json={"token": old})).status_code == 409
    batch = await acme.post(f"{W}/heartbeat", json={"leases": [{"job_id": job["id"], "token": old}]})
    assert batch.json()["lost"] == [job["id"]]
    assert (await acme.post(f"{W}/jobs/{job['id']}/complete", json={"token": old, "result": "late"})).status_code == 409
    report = await acme.post(f"{W}/report", json={"completions": [{"job_id": job["id"], "token": new, "result": 1}]})
    assert report.json() == {"completed": [job["id"]], "failed": [], "released": [], "refused": []}
    final = (await acme.get(f"/api/v1/jobs/{job['id']}")).json()
    assert final["result"] == 1 and [e["type"] for e in final["errors"]] == ["LeaseExpired"]


async def test_fail_retryable_not_retryable_and_cancelled(acme: httpx.AsyncClient) -> None:
    ids = [(await acme.post("/api/v1/jobs", json={"task": "f", "max_attempts": 3})).json()["id"] for _ in range(3)]
    entries = {e["job"]["id"]: e["lease"]["token"] for e in await claim(acme, tasks=["f"], limit=3)}
    error = {"type": "IOError", "message": "disk", "traceback": "Traceback..."}
    bodies = [
        {"job_id": ids[0], "token": entries[ids[0]], "error": error, "retry_delay": 120.0},
        {"job_id": ids[1], "token": entries[ids[1]], "error": error, "retryable": False},
        {"job_id": ids[2], "token": entries[ids[2]], "error": error, "cancelled": True},
    ]
    out = (await acme.post(f"{W}/report", json={"failures": bodies})).json()
    assert out["failed"] == ids and out["refused"] == []
    jobs = [(await acme.get(f"/api/v1/jobs/{i}")).json() for i in ids]
    assert [j["state"] for j in jobs] == ["failed", "dead", "cancelled"]
    assert jobs[0]["errors"][0]["message"] == "disk" and jobs[0]["errors"][0]["worker"] == "w1"
    assert jobs[0]["run_at"] > jobs[0]["updated_at"]  # retried after the delay asked for


async def test_claim_long_polls_by_task_and_in_batches(api: Api, acme: httpx.AsyncClient) -> None:
    await acme.post("/api/v1/jobs/batch", json={"jobs": [{"task": "a"}, {"task": "b"}, {"task": "a"}, {"task": "c"}]})
    got = await claim(acme, tasks=["a", "c"], limit=10)
    assert sorted(e["job"]["task"] for e in got) == ["a", "a", "c"]
    started = time.monotonic()
    assert await claim(acme, tasks=["a"], wait=0.3) == []  # nothing: waits, then answers empty
    assert 0.25 <= time.monotonic() - started < 2.0

    async def later() -> None:
        await asyncio.sleep(0.3)
        await api.engine.enqueue_many([NewJob(task="a", tenant="acme")])

    task = asyncio.create_task(later())
    started = time.monotonic()
    [entry] = await claim(acme, tasks=["a"], wait=1.9)
    waited = time.monotonic() - started
    await task
    assert entry["job"]["task"] == "a" and 0.25 <= waited < 1.5


async def test_heartbeat_reports_a_cancel_request(acme: httpx.AsyncClient) -> None:
    job = (await acme.post("/api/v1/jobs", json={"task": "long"})).json()
    [entry] = await claim(acme, tasks=["long"])
    await acme.post(f"/api/v1/jobs/{job['id']}/cancel")
    lease = {"job_id": job["id"], "token": entry["lease"]["token"]}
    hb = (await acme.post(f"{W}/heartbeat", json={"leases": [lease]})).json()
    assert hb == {"held": [job["id"]], "lost": [], "cancel_requested": [job["id"]]}
    per_job = await acme.post(f"{W}/jobs/{job['id']}/heartbeat", json={"token": lease["token"]})
    assert per_job.json()["cancel_requested"] is True
