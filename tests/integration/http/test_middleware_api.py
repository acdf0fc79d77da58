"""The HTTP API's enqueue goes through the engine's middleware: a ``before_enqueue`` hook that raises
InvalidJob refuses the request with a problem naming the field, and nothing is written."""

from __future__ import annotations

import httpx

from jobengine import InvalidJob, Job, Middleware, NewJob

from .conftest import Api


class PayloadRules(Middleware):
    def __init__(self) -> None:
        self.stored: list[str] = []

    def before_enqueue(self, job: NewJob) -> None:
        if isinstance(job.payload, dict) and "password" in job.payload:
            raise InvalidJob("payload.password", "secrets do not go in job payloads")

    async def after_enqueue(self, job: Job) -> None:
        self.stored.append(job.id)


async def test_an_enqueue_hook_refuses_an_api_request_with_a_problem(api: Api, acme: httpx.AsyncClient) -> None:
    rules = api.engine.middleware.add(PayloadRules())
    assert isinstance(rules, PayloadRules)
    r = await acme.post("/api/v1/jobs", json={"task": "login", "payload": {"user": "ada", "password": "x"}})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["field"] == "payload.password" and "secrets" in r.json()["detail"]
    assert await api.engine.count_jobs() == {}

    r = await acme.post("/api/v1/jobs", json={"task": "login", "payload": {"user": "ada"}})
    assert r.status_code == 201, r.text
    assert rules.stored == [r.json()["id"]]
