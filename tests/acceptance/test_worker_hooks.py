"""A ``jobengine worker --app`` process runs the middleware of the app it loads, around each attempt, and
``jobengine enqueue --app`` runs its enqueue hooks in its own process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance.conftest import Procs
from support.waiting import wait_for


def cli(procs: Procs, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "jobengine", *args], env=procs.env, cwd=procs.cwd,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip()


def state(procs: Procs, job_id: str) -> str:
    return str(json.loads(cli(procs, "jobs", "show", job_id, "--json"))["state"])


@pytest.mark.slow
def test_the_worker_process_runs_the_apps_hooks_around_each_attempt(procs: Procs, tmp_path: Path) -> None:
    hooks = tmp_path / "hooks.txt"
    procs.env["HOOKS"] = str(hooks)
    app = "tests.support.hooks_app:app"
    ids = {task: cli(procs, "enqueue", task, "--app", app) for task in ("flaky", "hopeless")}
    worker = procs.worker(app=app)
    wait_for(lambda: state(procs, ids["flaky"]) == "succeeded", 120, "flaky to succeed on its second attempt")
    wait_for(lambda: state(procs, ids["hopeless"]) == "dead", 120, "hopeless to go dead")
    worker.send_signal(signal.SIGTERM)  # a graceful stop: hooks still running finish first
    assert worker.wait(timeout=60) == 0, procs.output(worker)

    lines = [line.split(" ", 1) for line in hooks.read_text().splitlines()]
    enqueued = [(pid, rest) for pid, rest in lines if rest.startswith("before_enqueue")]
    ran = [(pid, rest) for pid, rest in lines if not rest.startswith("before_enqueue")]
    assert [rest for _, rest in enqueued] == ["before_enqueue flaky", "before_enqueue hopeless"]
    assert {pid for pid, _ in ran} == {str(worker.pid)}  # the worker's own process, not the enqueuer's
    assert str(worker.pid) not in {pid for pid, _ in enqueued}
    assert [rest for _, rest in ran if " flaky" in rest] == [
        "before_run flaky 1", "on_failure flaky first attempt", "on_retry flaky",
        "before_run flaky 2", "after_run flaky second",
    ]  # fmt: skip
    assert [rest for _, rest in ran if " hopeless" in rest] == [
        "before_run hopeless 1", "on_failure hopeless attempt 1", "on_retry hopeless",
        "before_run hopeless 2", "on_failure hopeless attempt 2", "on_dead hopeless",
    ]  # fmt: skip
