"""A worker, a scheduler and an API started while their PostgreSQL is down (a deploy that starts everything at
once, a server restarting) wait for it, saying so, and carry on once it is up, instead of exiting at once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.deploy import ROOT
from support.pgcluster import free_port, postgres_cluster
from support.processes import Processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


async def test_services_started_before_their_database_wait_for_it(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    with postgres_cluster() as cluster:
        async with Engine.from_settings(Settings(database=cluster.dsn)):
            pass  # migrated: the services find their schema once the server is back
        cluster.stop("fast")
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBENGINE_DATABASE": cluster.dsn, "NETBED_LEDGER": str(ledger),
               "NETBED_HOST": "w", "JOBENGINE_API_PORT": str(port)}  # fmt: skip
        procs = Processes(tmp_path, env, ROOT)
        try:
            app = ["--app", "tests.support.netbed_app:app"]
            worker = procs.run("worker", [sys.executable, "-m", "jobengine", "worker", *app])
            scheduler = procs.run("scheduler", [sys.executable, "-m", "jobengine", "scheduler", *app])
            api = procs.run("api", [sys.executable, "-m", "jobengine", "serve"])
            for p in (worker, scheduler, api):
                await asyncio.to_thread(procs.wait_output, p, "database unreachable", 120)
            cluster.start()
            async with Engine.from_settings(Settings(database=cluster.dsn)) as engine:
                job = await engine.enqueue("mark", {"sleep": 0.01})
                deadline = time.monotonic() + 120
                while (await engine.get_job(job.id)).state is not JobState.SUCCEEDED:
                    assert worker.poll() is None, procs.output(worker)
                    assert time.monotonic() < deadline, f"the job did not run: {procs.output(worker)}"
                    await asyncio.sleep(0.2)
            while not await asyncio.to_thread(_ready, port):
                assert api.poll() is None, procs.output(api)
                assert time.monotonic() < deadline, f"the API did not answer: {procs.output(api)}"
                await asyncio.sleep(0.2)
            await asyncio.to_thread(procs.wait_output, scheduler, "jobengine scheduler", 120)
            for p in (worker, scheduler, api):
                p.send_signal(signal.SIGTERM)
            for p in (worker, scheduler, api):
                assert await asyncio.to_thread(p.wait, 60) == 0, procs.output(p)
        finally:
            procs.stop_all()


async def test_services_stopped_while_they_wait_end_at_once(tmp_path: Path) -> None:
    """SIGTERM during the wait for the database: each ends with an error of its own, not killed by the signal
    (exit -15) and not after its whole wait."""
    with postgres_cluster() as cluster:
        cluster.stop("fast")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBENGINE_DATABASE": cluster.dsn,
               "JOBENGINE_API_PORT": str(free_port())}  # fmt: skip
        procs = Processes(tmp_path, env, ROOT)
        try:
            app = ["--app", "tests.support.netbed_app:app"]
            started = [
                procs.run("worker", [sys.executable, "-m", "jobengine", "worker", *app]),
                procs.run("scheduler", [sys.executable, "-m", "jobengine", "scheduler", *app]),
                procs.run("api", [sys.executable, "-m", "jobengine", "serve"]),
            ]
            for p in started:
                await asyncio.to_thread(procs.wait_output, p, "database unreachable", 120)
            for p in started:
                p.send_signal(signal.SIGTERM)
            for p in started:
                code = await asyncio.to_thread(p.wait, 30)  # not the whole wait for the database
                assert code > 0 and "error:" in procs.output(p), (code, procs.output(p))
        finally:
            procs.stop_all()
