"""``jobengine worker --metrics-port``: a worker process serves Prometheus metrics of its jobs, without a key.

The worker (tests/support/ledger_app.py) runs jobs that succeed, jobs that fail for good and one long enough
for heartbeats to extend its lease; the test scrapes the port as Prometheus would and reads the counters.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.request

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.waiting import wait_for

from .conftest import Procs

pytestmark = pytest.mark.timeout(180)

SUCCEED, FAIL = 12, 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics`` by (name, labels), fetched without any credentials."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_a_worker_serves_its_job_metrics_on_the_port_given(procs: Procs) -> None:
    port = _free_port()
    procs.env.update(JOBENGINE_HEARTBEAT_INTERVAL="0.2", JOBENGINE_LEASE_SECONDS="2", JOBENGINE_POLL_INTERVAL="0.2")
    worker = procs.worker("--metrics-port", str(port))
    procs.wait_ready(worker)

    async with Engine.from_settings(Settings(database=procs.env["JOBENGINE_DATABASE"])) as engine:
        jobs = [await engine.enqueue("work", {"i": i, "sleep": 0.01}) for i in range(SUCCEED)]
        jobs.append(await engine.enqueue("work", {"i": 99, "sleep": 1.0}))  # heartbeats extend its lease
        # float("never") raises in the task: with one attempt, each goes dead at once.
        jobs += [await engine.enqueue("work", {"sleep": "never"}, max_attempts=1) for _ in range(FAIL)]
        ended = [await engine.wait_for(j.id, timeout=60, poll=0.1) for j in jobs]
    assert [j.state for j in ended] == [JobState.SUCCEEDED] * (SUCCEED + 1) + [JobState.DEAD] * FAIL

    # The outcomes reach the metrics as the worker reports them: scrape until the last one is counted.
    def settled() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        samples = _scrape(port)
        dead = _value(samples, "jobengine_worker_jobs_failed_total", queue="default", task="work", outcome="dead")
        return samples if dead == FAIL and _value(samples, "jobengine_worker_jobs_in_flight") == 0 else None

    samples = wait_for(settled, 30, "the worker's metrics to count every job")
    work = {"queue": "default", "task": "work"}
    assert _value(samples, "jobengine_worker_jobs_started_total", **work) == SUCCEED + 1 + FAIL
    assert _value(samples, "jobengine_worker_jobs_succeeded_total", **work) == SUCCEED + 1
    assert _value(samples, "jobengine_worker_jobs_failed_total", **work, outcome="dead") == FAIL
    assert _value(samples, "jobengine_worker_jobs_failed_total", **work, outcome="retry") == 0
    assert _value(samples, "jobengine_worker_job_duration_seconds_count", **work) == SUCCEED + 1 + FAIL
    assert _value(samples, "jobengine_worker_job_duration_seconds_sum", **work) >= 1.0  # the long job's second
    assert _value(samples, "jobengine_worker_jobs_in_flight") == 0
    assert _value(samples, "jobengine_worker_jobs_claimed_total") == SUCCEED + 1 + FAIL
    assert _value(samples, "jobengine_worker_claim_seconds_count") >= 1
    assert _value(samples, "jobengine_worker_lease_extensions_total") >= 1

    # Another worker cannot take the same port: it says which setting to change, and exits.
    second = procs.worker("--metrics-port", str(port))
    assert second.wait(timeout=120) != 0
    assert "worker_metrics_port: cannot listen on" in procs.output(second)


def test_a_remote_worker_serves_the_same_metrics(procs: Procs) -> None:
    """``--remote`` with ``--metrics-port``: the worker claims over the API and counts what it ran."""
    created = subprocess.run(
        [sys.executable, "-m", "jobengine", "keys", "create", "--tenant", "acme", "--scope", "admin", "--json"],
        env=procs.env, cwd=procs.cwd, capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    key = json.loads(created.stdout)["key"]
    server = procs.spawn("server", "serve", "--port", "0")
    found = wait_for(lambda: re.search(r"http://127\.0\.0\.1:\d+", procs.output(server)), 120, "the server")
    port = _free_port()
    worker = procs.spawn(
        "remote", "worker", "--remote", found.group(0), "--key", key, "--app", "tests.support.remote_app:app",
        "--metrics-port", str(port),
    )  # fmt: skip
    procs.wait_ready(worker)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=found.group(0), headers=headers, timeout=60) as api:
        for _ in range(3):
            assert api.post("/api/v1/jobs", json={"task": "slow", "payload": {"first_sleep": 0.01}}).status_code < 300

    def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        samples = _scrape(port)
        ran = _value(samples, "jobengine_worker_jobs_succeeded_total", queue="default", task="slow")
        return samples if ran == 3 else None

    samples = wait_for(counted, 60, "the remote worker's metrics to count three jobs")
    assert _value(samples, "jobengine_worker_jobs_started_total", queue="default", task="slow") == 3
    assert _value(samples, "jobengine_worker_jobs_claimed_total") == 3
