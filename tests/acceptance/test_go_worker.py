"""The Go worker SDK (``sdk/go``) against a real ``jobengine serve`` on SQLite.

- ``gofmt``, ``go vet ./...`` and ``go test ./...``: the Go tests get the server's URL and a key with the
  ``worker``, ``jobs:*`` and ``graph:*`` scopes through ``JOBENGINE_TEST_URL`` / ``JOBENGINE_TEST_KEY`` (they
  skip without them; here they must run, not skip): among them graphs submitted from Go, run by a Go worker,
  with failure policies, retry and cancel, a fan-in node summing its parents' results, and a Go node adding
  nodes to its graph with its completion (a join declared in advance sums them; a refused add ends it dead),
  and a job's traceparent reaching its Go handler, whose calls send it (the server's tracing is on);
- the cross-language test: 500 jobs enqueued from Python, processed by two Go example worker processes
  (``sdk/go/examples/worker``), one SIGKILLed mid-way: every job succeeds, none runs to completion twice
  (a ledger the handlers append to), the killed worker's jobs run again once their lease expired; a job
  whose Go handler panics fails alone (its error is the panic message) and the worker goes on.

Go missing: the tests skip locally and fail under CI (``make test`` installs it). Builds go to a cache in
the temp dir, so only the first run compiles the standard library (~30 s on two busy cores).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.processes import Processes
from support.services import unavailable
from support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
GO_DIR = ROOT / "sdk" / "go"
LEASE = 2.0
JOBS = 500
CONCURRENCY = 8
GO_TESTS = [
    "TestPhasesProgressAndResults",
    "TestAPlainHandlerResumesFromItsCheckpoint",
    "TestALaterAttemptSkipsSucceededPhasesAndResumesFromTheCheckpoint",
    "TestRetryableAndPermanentErrors",
    "TestAPanicFailsOnlyItsJobAndTheWorkerKeepsGoing",
    "TestALostLeaseCancelsTheHandlerAndNothingIsReported",
    "TestACancelRequestStopsTheHandler",
    "TestAJobTimeoutFailsTheAttempt",
    "TestGracefulShutdownFinishesQuickJobsAndReleasesTheRest",
    "TestRunReturnsAnErrorWhenTheKeyIsRefused",
    "TestRetriesA503AndHonoursRetryAfter",
    "TestWaitReturnsTheJobOnceItEnds",
    "TestWaitRunsOutWithTheJobAsItIs",
    "TestWaitForAnUnknownJobIsNotFound",
    "TestSubmitGraphSendsTheAPIsJSONWithAfterAsEdges",
    "TestWaitGraphReadsUntilTheGraphEnds",
    "TestWaitGraphRunsOutWithTheGraphAsItIs",
    "TestAGraphSubmittedFromGoRunsOnAGoWorker",
    "TestGraphFailurePoliciesThenRetry",
    "TestCancelAGraphStopsItsRunningNode",
    "TestABadGraphIsRefusedNamingTheField",
    "TestAGoFanInNodeSumsItsParentsResults",
    "TestParentResultsPastTheLimitFailTheJobForGood",
    "TestAddNodeRefusesWhatItCanCheckNamingTheField",
    "TestAddNodeNamesNodesOnceAndCapsTheirNumber",
    "TestACompletionCarriesTheAddedNodesInTheProtocolsShape",
    "TestSubmitGraphTurnsBeforeIntoEdges",
    "TestAGoSplitNodeAddsNodesThatAJoinDeclaredInAdvanceSums",
    "TestAnAddTheGraphRefusesEndsTheNodeDead",
    "TestWithTraceParentSendsTheHeaderAndIgnoresAnInvalidOne",
    "TestAJobCarriesItsTraceToTheHandlerAndTheHandlersCallsSendIt",
]

pytestmark = pytest.mark.slow


def go_env() -> dict[str, str]:
    """The environment of every go command: standard library only (no module downloads), no cgo (no C
    compiler needed), and a build cache in the temp dir that later runs reuse."""
    go = shutil.which("go")
    if go is None:
        unavailable("the Go toolchain is not installed (`make test` installs golang-go; or apt-get install golang-go)")
    cache = Path(tempfile.gettempdir()) / f"jobengine-go-build-{os.getuid()}"
    return {
        **os.environ,
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
        "GOCACHE": str(cache / "cache"),
        "GOPATH": str(cache / "path"),
    }


def go(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["go", *args], cwd=GO_DIR, env=env, capture_output=True, text=True, timeout=timeout)


class Server(Processes):
    """A ``jobengine serve`` process on a SQLite file of its own, with a key of tenant ``gotest``."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "JOBENGINE_DATABASE": str(tmp / "jobs.db"),
            "JOBENGINE_RESCUE_INTERVAL": "0.25",  # the server's rescuer of expired leases
            "JOBENGINE_TRACING": "1",  # jobs store the traceparent they were enqueued under (the trace test)
        }, ROOT)  # fmt: skip
        self.url = ""
        self.key = ""

    def start(self) -> None:
        out = subprocess.run(
            [sys.executable, "-m", "jobengine", "keys", "create", "--tenant", "gotest", "--scope", "worker",
             "--scope", "jobs:read", "--scope", "jobs:write", "--scope", "graph:read", "--scope", "graph:write",
             "--json"],
            env=self.env, cwd=ROOT, capture_output=True, timeout=60, check=True,
        )  # fmt: skip
        self.key = json.loads(out.stdout)["key"]
        self.server = self.spawn("server", "serve", "--port", "0")
        found = wait_for(lambda: re.search(r"http://127\.0\.0\.1:\d+", self.output("server")), 120, "the server")
        assert self.server.poll() is None, self.output("server")
        self.url = found.group(0)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    go_env()  # skip (or fail under CI) before starting anything when Go is missing
    s = Server(tmp_path)
    try:
        s.start()
        yield s
    finally:
        s.stop_all()


@pytest.mark.timeout(400)
def test_go_sdk_is_formatted_vetted_and_its_tests_pass_against_a_real_server(server: Server) -> None:
    env = go_env()
    unformatted = subprocess.run(["gofmt", "-l", "."], cwd=GO_DIR, capture_output=True, text=True, timeout=60)
    assert unformatted.returncode == 0 and unformatted.stdout == "", f"not gofmt'd: {unformatted.stdout}"
    vet = go(env, "vet", "./...")
    assert vet.returncode == 0, vet.stdout + vet.stderr
    env = {**env, "JOBENGINE_TEST_URL": server.url, "JOBENGINE_TEST_KEY": server.key}
    test = go(env, "test", "-count=1", "-v", "./...")
    out = test.stdout + test.stderr
    assert test.returncode == 0, out
    assert "--- SKIP" not in out, out
    passed = set(re.findall(r"--- PASS: (\w+)", out))
    assert set(GO_TESTS) <= passed, f"missing: {sorted(set(GO_TESTS) - passed)}\n{out}"


def build_worker(tmp: Path) -> Path:
    binary = tmp / "go-worker"
    build = go(go_env(), "build", "-o", str(binary), "./examples/worker")
    assert build.returncode == 0, build.stdout + build.stderr
    return binary


def ledger(path: Path) -> list[tuple[str, str, int, int]]:
    """(kind, job id, attempt, pid) per line; kind is start or done."""
    if not path.exists():
        return []
    return [(k, j, int(a), int(p)) for k, j, a, p in (line.split() for line in path.read_text().splitlines())]


@pytest.mark.timeout(900)
def test_500_jobs_two_go_workers_one_sigkilled_all_succeed_once(server: Server, tmp_path: Path) -> None:
    binary = build_worker(tmp_path)
    ledger_path = tmp_path / "ledger.txt"
    env = {**os.environ, "LEDGER": str(ledger_path), "JOBENGINE_API_KEY": server.key}
    argv = [str(binary), "-url", server.url, "-queues", "xlang", "-concurrency", str(CONCURRENCY), "-lease",
            f"{LEASE:g}s", "-long-poll", "1s", "-grace", "1s"]  # fmt: skip
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=30) as api:
        batch = [{"task": "hello", "queue": "xlang", "payload": {"name": f"n{i}"}, "max_attempts": 5}
                 for i in range(JOBS)]  # fmt: skip
        enqueued = api.post("/api/v1/jobs/batch", json={"jobs": batch})
        assert enqueued.status_code == 201, enqueued.text
        names = {j["id"]: j["payload"]["name"] for j in enqueued.json()["jobs"]}

        doomed = server.run("worker-a", argv, env)
        survivor = server.run("worker-b", argv, env)

        def mid_way() -> bool:
            """The first worker finished 100 jobs and has at least half its slots busy."""
            kinds = [k for k, _, _, p in ledger(ledger_path) if p == doomed.pid]
            done = kinds.count("done")
            return done >= 100 and len(kinds) - 2 * done >= CONCURRENCY // 2

        wait_for(mid_way, 120, "the first worker to be mid-way")
        server.kill(doomed)
        killed_at = time.monotonic()

        # A job whose handler panics, first in line (priority) for the surviving worker.
        panicking = {"task": "crash", "queue": "xlang", "max_attempts": 1, "priority": 10,
                     "payload": {"message": "index out of range [3] with length 3"}}  # fmt: skip
        crash = api.post("/api/v1/jobs", json=panicking)
        assert crash.status_code == 201, crash.text

        def succeeded() -> list[dict[str, Any]] | None:
            page = api.get("/api/v1/jobs", params={"queue": "xlang", "state": "succeeded", "limit": 500}).json()
            return page["items"] if len(page["items"]) == JOBS else None

        jobs = {j["id"]: j for j in wait_for(succeeded, 300, "all 500 jobs to succeed")}
        all_done_after = time.monotonic() - killed_at
        dead = api.get(f"/api/v1/jobs/{crash.json()['id']}").json()

    assert set(jobs) == set(names)
    assert all(j["result"] == f"hello {names[i]}" for i, j in jobs.items())
    lines = ledger(ledger_path)
    assert {p for _, _, _, p in lines} == {doomed.pid, survivor.pid}

    done: dict[str, list[tuple[int, int]]] = defaultdict(list)
    started_by_doomed: set[tuple[str, int]] = set()  # (job, attempt)
    for kind, job_id, attempt, pid in lines:
        if kind == "done" and job_id in jobs:
            done[job_id].append((attempt, pid))
        elif kind == "start" and pid == doomed.pid:
            started_by_doomed.add((job_id, attempt))
    # None twice: each job ran to completion exactly once in its final (reported) attempt. A job can show an
    # earlier "done" from the killed worker (its handler returned, the report never left), or from either
    # worker in an attempt whose lease expired first (a loaded machine delays a heartbeat past the lease):
    # then the job carries that attempt's LeaseExpired and the late report was refused.
    for job_id, job in jobs.items():
        finals = [d for d in done[job_id] if d[0] == job["attempt"]]
        assert len(finals) == 1, (job_id, job["attempt"], done[job_id])
        expired = {e["attempt"] for e in job["errors"] if e["type"] == "LeaseExpired"}
        for attempt, pid in (d for d in done[job_id] if d[0] != job["attempt"]):
            assert attempt < job["attempt"], (job_id, done[job_id])
            assert pid == doomed.pid or attempt in expired, (job_id, done[job_id], job["errors"])
    unreported = {i for i, d in done.items() if len(d) > 1}
    unreported_by_doomed = {
        i for i in unreported if any(pid == doomed.pid and a != jobs[i]["attempt"] for a, pid in done[i])
    }
    assert len(unreported_by_doomed) <= CONCURRENCY

    # The killed worker's jobs in flight ran again after their lease expired (the rescuer's LeaseExpired).
    # In flight at the kill: an attempt it started and never finished (an earlier attempt it finished after
    # its lease expired under load is not one, though the job's final attempt ran elsewhere).
    in_flight = {i for i, a in started_by_doomed if (a, doomed.pid) not in done[i]}
    assert in_flight, "the first worker had no job in flight when it was killed"
    assert len(in_flight) <= CONCURRENCY
    for job_id in in_flight:
        job = jobs[job_id]
        assert job["attempt"] >= 2 and "LeaseExpired" in [e["type"] for e in job["errors"]], job
        assert done[job_id][-1] == (job["attempt"], survivor.pid)
    finished_by_doomed = {i for i, _ in started_by_doomed if (jobs[i]["attempt"], doomed.pid) in done[i]}
    # Its jobs finished cleanly: an earlier attempt, if any, only ended by an expired lease (see above).
    assert all({e["type"] for e in jobs[i]["errors"]} <= {"LeaseExpired"} for i in finished_by_doomed)
    assert len(finished_by_doomed) + len(unreported_by_doomed) >= 100  # its 100 "done" lines

    # The panic failed its job alone, recorded with its message; the survivor went on with the rest.
    assert dead["state"] == "dead", dead
    [error] = dead["errors"]
    assert error["type"] == "panic" and error["message"] == "panic: index out of range [3] with length 3", error
    assert f":{survivor.pid}:" in error["worker"] and "goroutine" in error["traceback"]
    assert "handler panicked" in server.output("worker-b")

    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}, timeout=30) as api:
        sigterm_releases_a_long_job(server, api, survivor, ledger_path)
    print(f"\n{JOBS} jobs, 2 Go workers, one SIGKILLed after {len(finished_by_doomed)} jobs with {len(in_flight)} in "
          f"flight: all succeeded {all_done_after:.1f}s after the kill (lease {LEASE:g}s); "
          f"{len(unreported)} ran twice because the killed worker's report never left")  # fmt: skip


def sigterm_releases_a_long_job(
    server: Server, api: httpx.Client, worker: subprocess.Popen[bytes], ledger_path: Path
) -> None:
    """SIGTERM with a long ``etl`` job in flight: the worker stops claiming, waits its grace period (1 s),
    releases the job (queued again, its attempt not spent, the progress it reported kept) and exits 0."""
    etl = api.post("/api/v1/jobs", json={"task": "etl", "queue": "xlang", "payload": {"rows": 100_000}}).json()

    def reported_progress() -> bool:
        job = api.get(f"/api/v1/jobs/{etl['id']}").json()
        return bool(job["phases"]) and job["phases"][0]["progress"] > 0

    wait_for(reported_progress, 120, "the etl job's progress")
    assert ("start", etl["id"], 1, worker.pid) in ledger(ledger_path)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, server.output("worker-b")
    assert "releasing 1 jobs" in server.output("worker-b") and "stopped" in server.output("worker-b")
    job = api.get(f"/api/v1/jobs/{etl['id']}").json()
    assert job["state"] == "queued" and job["errors"] == [], job
    assert job["phases"][0]["name"] == "extract" and job["phases"][0]["progress"] > 0, job["phases"]
