"""A remote SDK worker process, SIGKILLed mid-job, against a ``jobengine serve`` process: the job runs again
on another worker once its lease expires, and the killed worker's late completion is refused."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.processes import Processes
from support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
LEASE = 2.0


class Cluster(Processes):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "JOBENGINE_DATABASE": str(tmp / "jobs.db"),
            "JOBENGINE_RESCUE_INTERVAL": "0.25",  # the server's rescuer of expired leases
            "LEDGER": str(tmp / "ledger.txt"),
        }, ROOT)  # fmt: skip
        self.url = ""
        self.key = ""

    def cli(self, *args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "jobengine", *args], env=self.env, cwd=ROOT, capture_output=True,
                             timeout=60, check=True)  # fmt: skip
        return out.stdout.decode()

    def ledger(self) -> list[list[str]]:
        path = self.tmp / "ledger.txt"
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        return self.spawn(name, "worker", "--remote", self.url, "--key", self.key, "--app",
                          "tests.support.remote_app:app", "--lease", str(LEASE), "--concurrency", "2")  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sigkilled_remote_worker_job_reruns_and_its_late_completion_is_refused(cluster: Cluster) -> None:
    cluster.key = json.loads(cluster.cli("keys", "create", "--tenant", "acme", "--scope", "admin", "--json"))["key"]
    server = cluster.spawn("server", "serve", "--port", "0")
    url = wait_for(lambda: re.search(r"http://127\.0\.0\.1:\d+", cluster.output("server")), 120, "the server")
    assert server.poll() is None, cluster.output("server")
    cluster.url = url.group(0)  # type: ignore[attr-defined]
    with httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {cluster.key}"}, timeout=60) as api:
        run_scenario(cluster, server, api)


def run_scenario(cluster: Cluster, server: subprocess.Popen[bytes], api: httpx.Client) -> None:
    job = api.post("/api/v1/jobs", json={"task": "slow", "payload": {"first_sleep": 60}}).json()

    doomed = cluster.worker("worker-a")
    start = wait_for(lambda: [r for r in cluster.ledger() if r[0] == "start"], 120, "the first attempt")
    [_, job_id, attempt, old_token, pid] = start[0]  # type: ignore[index]
    assert (job_id, attempt, int(pid)) == (job["id"], "1", doomed.pid)
    cluster.kill(doomed)
    killed_at = time.monotonic()

    cluster.worker("worker-b")
    done = wait_for(lambda: api.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "succeeded", 120, "the rerun")
    assert done
    rerun_after = time.monotonic() - killed_at
    final = api.get(f"/api/v1/jobs/{job['id']}").json()
    assert final["attempt"] == 2 and final["result"]["attempt"] == 2 and final["result"]["pid"] != doomed.pid
    assert [e["type"] for e in final["errors"]] == ["LeaseExpired"]
    assert [r[0] for r in cluster.ledger()] == ["start", "start", "done"]  # the killed attempt never finished

    # The killed worker's completion, arriving late, is refused and changes nothing.
    late = api.post(f"/api/v1/worker/jobs/{job['id']}/complete", json={"token": old_token, "result": "late"})
    assert late.status_code == 409, late.text
    report = api.post("/api/v1/worker/report", json={"completions": [{"job_id": job["id"], "token": old_token}]})
    assert report.json()["refused"] == [job["id"]]
    assert api.get(f"/api/v1/jobs/{job['id']}").json()["result"] == final["result"]
    # The remote worker logs as a local one does: what it reaches, and each job's end (and the start of one
    # still running 0.1 s after it began).
    out = cluster.output("worker-b")
    assert f"store        the server at {cluster.url}" in out and "transport    http" in out, out
    assert re.search(r"\(slow\) succeeded in \d+ ms \(attempt 2 of ", out), out
    print(f"\nremote worker SIGKILLed mid-job: rerun and succeeded {rerun_after:.1f}s later (lease {LEASE:g}s)")

    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=15) == 0, cluster.output("server")
