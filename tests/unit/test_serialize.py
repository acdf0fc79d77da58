"""The JSON shape of jobs and events, shared by the CLI's --json and the HTTP API: stable keys, ISO times,
no lease token."""

from __future__ import annotations

import json

from jobengine.core.clock import ManualClock
from jobengine.core.ids import WorkerId
from jobengine.core.models import AttemptError, FailOutcome, Failure
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.sdk.convert import job_from_json
from jobengine.serialize import event_to_json, job_to_json
from jobengine.settings import Settings

JOB_KEYS = [
    "id", "tenant", "queue", "task", "state", "outcome", "payload", "priority", "run_at", "attempt",
    "max_attempts", "idempotency_key", "depends_on", "timeout", "lease", "cancel_requested", "reason",
    "progress", "phases", "result", "errors", "created_at", "updated_at", "started_at", "finished_at", "run_id",
    "schedule_id", "graph_id", "trace", "has_dependents", "waiting_for",
]  # fmt: skip


async def test_a_job_has_every_key_in_order_and_survives_json() -> None:
    clock = ManualClock(1_700_000_000.0)
    async with Engine(open_store("memory"), Settings(database="memory"), clock) as engine:
        job = await engine.enqueue("work", {"a": [1, 2]}, priority=3, idempotency_key="k")
        data = job_to_json(job)
        assert list(data) == JOB_KEYS
        assert json.loads(json.dumps(data)) == data
        assert data["created_at"] == "2023-11-14T22:13:20.000+00:00"
        assert (data["state"], data["lease"], data["started_at"]) == ("queued", None, None)

        (running,) = await engine.transitions.fetch_jobs(["default"], 1, WorkerId("w1"), 30.0)
        data = job_to_json(running)
        assert data["lease"] == {"worker": "w1", "expires_at": "2023-11-14T22:13:50.000+00:00"}
        assert running.lease_token is not None and running.lease_token not in json.dumps(data)

        error = AttemptError(1, clock.now(), "ValueError", "broken", "Traceback ...", "w1")
        assert running.lease_token is not None
        await engine.transitions.fail_jobs([Failure(running.id, running.lease_token, error, FailOutcome.DEAD)])
        dead = job_to_json(await engine.get_job(job.id))
        assert dead["state"] == "dead" and dead["lease"] is None
        assert dead["errors"] == [
            {
                "attempt": 1,
                "at": "2023-11-14T22:13:20.000+00:00",
                "type": "ValueError",
                "message": "broken",
                "traceback": "Traceback ...",
                "worker": "w1",
            }
        ]

        events = [event_to_json(e) for e in await engine.events(job_id=job.id)]
        assert [e["type"] for e in events] == ["job.enqueued", "job.started", "job.dead"]
        assert list(events[0]) == ["id", "at", "type", "tenant", "job_id", "queue", "task", "data"]
        assert events[0]["data"]["state"] == "queued"
        assert json.loads(json.dumps(events)) == events


async def test_phases_serialise_with_iso_times() -> None:
    async with Engine(open_store("memory"), Settings(database="memory"), ManualClock()) as engine:

        async def extract(ctx: object) -> int:
            return 1

        engine.add_task("etl", phases=[extract])
        job = await engine.enqueue("etl")
        (phase,) = job_to_json(job)["phases"]
        assert phase == {
            "name": "extract",
            "state": "pending",
            "progress": 0.0,
            "message": None,
            "result": None,
            "checkpoint": None,
            "started_at": None,
            "finished_at": None,
        }


async def test_a_remote_worker_reads_back_the_job_it_was_handed() -> None:
    # What the worker protocol hands out (job_to_json) is what the SDK's worker runs (job_from_json): every
    # field but the lease token, which the claim answer carries beside the job. has_dependents included:
    # the worker reports such a job's outcome at once.
    clock = ManualClock(1_700_000_000.0)
    async with Engine(open_store("memory"), Settings(database="memory"), clock) as engine:
        parent = await engine.enqueue("work", {"a": [1, 2]}, priority=3, idempotency_key="k")
        await engine.enqueue("next", depends_on=[parent.id])
        (running,) = await engine.transitions.fetch_jobs(["default"], 1, WorkerId("w1"), 30.0)
        assert running.has_dependents
        lease = {"token": running.lease_token, "expires_at": job_to_json(running)["lease"]["expires_at"]}
        assert job_from_json(json.loads(json.dumps(job_to_json(running))), lease) == running
