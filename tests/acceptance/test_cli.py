"""The ``jobengine`` command end to end: real subprocesses on a SQLite file in the test's own temp dir.

Every command runs as ``python -m jobengine`` with the temp dir as its working directory (so the default
``.jobengine/jobengine.db`` and ``./jobengine.yaml`` are the test's own) and without any ``JOBENGINE_*`` variable of
the calling environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobengine.core.ids import short_id
from jobengine.core.models import Job, JobFilter
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.settings import Settings
from support.processes import Processes
from support.waiting import wait_for

T = TypeVar("T")

TERMINAL = {"succeeded", "dead", "cancelled"}


class Cli(Processes):
    """Runs ``jobengine`` commands in ``cwd``; processes it spawned are killed at teardown."""

    def __init__(self, cwd: Path) -> None:
        super().__init__(cwd, {k: v for k, v in os.environ.items() if not k.startswith("JOBENGINE_")}, cwd)

    def __call__(self, *args: str, expect: int = 0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "jobengine", *args],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == expect, (
            f"`jobengine {' '.join(args)}` exited {proc.returncode}, expected {expect}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        )
        return proc

    def json(self, *args: str, stdin: str | None = None) -> Any:
        return json.loads(self(*args, "--json", stdin=stdin).stdout)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(tmp_path)
    yield runner
    runner.stop_all()


def assert_one_error_line(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


# -- migrate ----------------------------------------------------------------------------------------------
def test_migrate_applies_the_schema_once(cli: Cli) -> None:
    first = cli("migrate")
    assert "applied migrations 1" in first.stdout
    assert (cli.cwd / ".jobengine" / "jobengine.db").exists()
    assert "up to date" in cli("migrate").stdout
    assert "applied migrations 1" in cli("migrate", "--db", "other.db").stdout


# -- enqueue and show -------------------------------------------------------------------------------------
def test_enqueue_prints_the_id_and_show_json_has_every_field(cli: Cli) -> None:
    job_id = cli(
        "enqueue", "hello", "--payload", '{"name": "Ada"}', "--queue", "mail", "--priority", "5",
        "--max-attempts", "4", "--idempotency-key", "greet-ada", "--tenant", "acme",
    ).stdout.strip()  # fmt: skip
    job = cli.json("jobs", "show", job_id)
    assert job["id"] == job_id
    assert (job["task"], job["queue"], job["tenant"], job["state"]) == ("hello", "mail", "acme", "queued")
    assert (job["payload"], job["priority"], job["max_attempts"], job["attempt"]) == ({"name": "Ada"}, 5, 4, 0)
    assert job["idempotency_key"] == "greet-ada"
    assert job["created_at"].endswith("+00:00") and job["finished_at"] is None
    assert job["lease"] is None and "lease_token" not in job
    assert set(job) >= {"depends_on", "phases", "errors", "result", "progress", "run_at", "reason", "outcome"}

    again = cli.json("enqueue", "hello", "--payload", '{"name": "Ada"}', "--queue", "mail", "--tenant", "acme",
                     "--idempotency-key", "greet-ada")  # fmt: skip
    assert again["id"] == job_id  # the same key returns the job it made

    shown = cli("jobs", "show", job_id).stdout
    assert job_id in shown and "queued" in shown and "job.enqueued" in shown


def test_enqueue_takes_the_defaults_of_the_task_registered_by_app(cli: Cli) -> None:
    # jobengine.examples registers resize_image on queue media with 3 attempts.
    resize = cli.json("enqueue", "resize_image", "--app", "jobengine.examples:app", "--db", "app.db")
    assert (resize["queue"], resize["max_attempts"]) == ("media", 3)
    chosen = cli.json("enqueue", "resize_image", "--app", "jobengine.examples:app", "--db", "app.db",
                      "--queue", "bulk", "--max-attempts", "1")  # fmt: skip
    assert (chosen["queue"], chosen["max_attempts"]) == ("bulk", 1)  # what is given wins
    assert cli.json("enqueue", "hello", "--app", "jobengine.examples:app", "--db", "app.db")["queue"] == "default"
    assert cli.json("jobs", "show", resize["id"], "--db", "app.db")["queue"] == "media"  # stored where --db says
    assert cli.json("enqueue", "resize_image")["queue"] == "default"  # no --app: nothing knows the task
    assert_one_error_line(cli("enqueue", "x", "--app", "nowhere_module:app", expect=2), "app: cannot import")


def test_enqueue_reads_payload_files_stdin_delays_and_dependencies(cli: Cli) -> None:
    (cli.cwd / "payload.json").write_text('{"rows": 3}')
    from_file = cli.json("enqueue", "etl", "--payload-file", "payload.json", "--delay", "60")
    assert from_file["payload"] == {"rows": 3}
    assert from_file["state"] == "scheduled"

    from_stdin = cli.json("enqueue", "hello", "--payload-file", "-", stdin='["a", 1]')
    assert from_stdin["payload"] == ["a", 1]

    later = cli.json("enqueue", "hello", "--run-at", "2999-01-01T00:00:00+00:00")
    assert later["state"] == "scheduled" and later["run_at"].startswith("2999-01-01T00:00:00")

    child = cli.json("enqueue", "publish", "--depends-on", from_file["id"], "--depends-on", from_stdin["id"])
    assert child["state"] == "blocked"
    assert child["depends_on"] == [from_file["id"], from_stdin["id"]]


# -- list -------------------------------------------------------------------------------------------------
def test_jobs_list_filters_and_renders_a_table(cli: Cli) -> None:
    first = cli("enqueue", "hello").stdout.strip()
    second = cli("enqueue", "hello", "--queue", "other").stdout.strip()
    scheduled = cli("enqueue", "etl", "--delay", "600").stdout.strip()

    assert [j["id"] for j in cli.json("jobs", "list")] == [scheduled, second, first]  # newest first
    assert {j["id"] for j in cli.json("jobs", "list", "--task", "hello")} == {first, second}
    assert [j["id"] for j in cli.json("jobs", "list", "--queue", "other")] == [second]
    assert [j["id"] for j in cli.json("jobs", "list", "--state", "scheduled")] == [scheduled]
    assert len(cli.json("jobs", "list", "--state", "queued,scheduled", "--limit", "2")) == 2
    assert cli.json("jobs", "list", "--state", "dead") == []

    table = cli("jobs", "list").stdout
    for job_id in (first, second, scheduled):
        assert short_id(job_id) in table  # the short form, a prefix `jobs show` takes
    assert "hello" in table and "scheduled" in table
    assert "no jobs match" in cli("jobs", "list", "--task", "nothing").stdout


# -- cancel and retry -------------------------------------------------------------------------------------
def test_cancel_a_waiting_job_then_retry_it(cli: Cli) -> None:
    job_id = cli("enqueue", "hello", "--delay", "600").stdout.strip()
    assert cli("jobs", "cancel", job_id, "--reason", "not needed").stdout.strip() == f"cancelled {job_id}"
    job = cli.json("jobs", "show", job_id)
    assert (job["state"], job["reason"]) == ("cancelled", "not needed")

    again = cli("jobs", "cancel", job_id, expect=1)
    assert_one_error_line(again, job_id, "already cancelled")

    retried = cli.json("jobs", "retry", job_id)
    assert (retried["state"], retried["attempt"]) == ("queued", 0)


def test_retry_a_dead_job(cli: Cli) -> None:
    job_id = cli("enqueue", "flaky", "--payload", '{"fail_rate": 1}', "--max-attempts", "1").stdout.strip()
    worker = cli.spawn("worker", "worker", "--app", "jobengine.examples:app", "--db", ".jobengine/jobengine.db")
    dead = wait_for(
        lambda: (job := cli.json("jobs", "show", job_id))["state"] == "dead" and job, 30, "the flaky job to die"
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, cli.output(worker)
    assert [(e["attempt"], e["type"]) for e in dead["errors"]] == [(1, "ConnectionError")]
    assert "ConnectionError" in cli("jobs", "show", job_id).stdout

    retry = cli("jobs", "retry", job_id)
    assert f"queued {job_id} again" in retry.stdout
    job = cli.json("jobs", "show", job_id)
    assert (job["state"], job["attempt"], len(job["errors"])) == ("queued", 0, 1)  # the history stays

    not_now = cli("jobs", "retry", job_id, expect=1)
    assert_one_error_line(not_now, "only dead, cancelled or failed jobs can be retried")


def test_worker_reads_the_config_file_given_with_config(cli: Cli) -> None:
    """``--config`` names a settings file that is not ./jobengine.yaml: the worker, like ``serve`` and
    ``scheduler``, runs on its database and queues, also with an --app engine built on other settings."""
    (cli.cwd / "conf").mkdir()
    config = cli.cwd / "conf" / "worker.yaml"
    config.write_text(f"database: {cli.cwd / 'from-config.db'}\nworker_queues: [media]\n")
    args = ("--payload", '{"images": 1}', "--queue", "media", "--config", str(config))
    job_id = cli("enqueue", "resize_image", *args).stdout.strip()
    worker = cli.spawn("worker", "worker", "--app", "jobengine.examples:app", "--config", str(config))

    def succeeded() -> bool:
        assert worker.poll() is None, cli.output(worker)
        return bool(cli.json("jobs", "show", job_id, "--config", str(config))["state"] == "succeeded")

    wait_for(succeeded, 120, "the job in the config's database to succeed")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, cli.output(worker)
    assert "started on queues media" in cli.output(worker)
    assert not (cli.cwd / ".jobengine").exists()  # the app's default database was never opened


# -- errors -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["enqueue", "hello", "--payload", "{nope"], ["payload: not valid JSON ("]),
        (["enqueue", "hello", "--payload", "{}", "--payload-file", "p.json"], ["payload: give --payload or"]),
        (["enqueue", "hello", "--payload-file", "missing.json"], ["payload-file: cannot read missing.json"]),
        (["enqueue", "hello", "--priority", "high"], ["'--priority'"]),
        (["enqueue", "hello", "--max-attempts", "0"], ["max_attempts: "]),
        (["enqueue", "hello", "--run-at", "tomorrow"], ["run_at: 'tomorrow' is not an ISO 8601 time"]),
        (["enqueue", "hello", "--run-at", "2030-01-01T09:00:00"], ["run_at: ", "time zone"]),
        (["enqueue", "no such task!"], ["task: "]),
        (["enqueue", "hello", "--depends-on", "nope"], ["depends_on: job 'nope' does not exist"]),
        (["enqueue", "hello", "--config", "missing.yaml"], ["config: missing.yaml does not exist"]),
        (["enqueue"], ["Missing argument 'TASK'"]),
        (["jobs", "list", "--state", "done"], ["state: unknown state 'done'"]),
        (["jobs", "list", "--db", "absent.db"], ["database: absent.db does not exist"]),
        (["worker", "--app", "no_such_module_here:app"], ["app: cannot import module 'no_such_module_here'"]),
        (["worker", "--app", "jobengine.examples"], ["app: expected module:attribute"]),
        (["worker", "--app", "jobengine.examples:nothing"], ["app: 'jobengine.examples' has no attribute"]),
        (["worker", "--app", "jobengine.examples:DEMO_KEY_PREFIX"], ["app: ", "expected an Engine"]),
        (["up", "--concurrency", "0"], ["'--concurrency'"]),
        (["no-such-command"], ["No such command"]),
    ],
)
def test_usage_and_validation_errors_are_one_red_line_exit_2(cli: Cli, args: list[str], fragments: list[str]) -> None:
    assert_one_error_line(cli(*args, expect=2), *fragments)
    assert not (cli.cwd / "absent.db").exists()


def test_bad_settings_are_named(cli: Cli) -> None:
    (cli.cwd / "jobengine.yaml").write_text("worker_concurrency: many\n")
    assert_one_error_line(cli("jobs", "list", expect=2), "worker_concurrency: 'many' is not a valid int")
    (cli.cwd / "jobengine.yaml").write_text("no_such_setting: 1\n")
    assert_one_error_line(cli("migrate", expect=2), "no_such_setting: unknown setting")


@pytest.mark.parametrize("command", ["show", "cancel", "retry"])
def test_an_unknown_job_is_one_line_exit_1(cli: Cli, command: str) -> None:
    cli("migrate")
    assert_one_error_line(cli("jobs", command, "x", expect=1), "job 'x' not found")


def test_every_entry_point_runs() -> None:
    for argv in ([sys.executable, "-m", "jobengine"], [sys.executable, "-m", "jobengine.cli.main"]):
        proc = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0 and "enqueue" in proc.stdout, proc.stderr
    script = Path(sys.executable).with_name("jobengine")
    if script.exists():  # the console script of an installed (editable) package
        proc = subprocess.run([str(script), "jobs", "--help"], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0 and "retry" in proc.stdout, proc.stderr


# -- long-running commands --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_up_runs_the_demo_jobs_and_stops_cleanly_on_sigterm(cli: Cli) -> None:
    # ./jobengine.yaml is read by `up` itself: a short grace period, so a long job gets released.
    # api_port 0: the API `up` serves listens on a free port, so the test never collides with a real 8080.
    (cli.cwd / "jobengine.yaml").write_text("grace_period: 1\npoll_interval: 0.2\napi_port: 0\n")
    up = cli.spawn("up", "up")

    def demo_done() -> list[dict[str, Any]] | None:
        if up.poll() is not None:
            raise AssertionError(f"`jobengine up` exited {up.returncode}:\n{cli.output(up)}")
        if not (cli.cwd / ".jobengine" / "jobengine.db").exists():
            return None
        # The demo schedule's runs add jobs at every minute: only the demo jobs (no run) are counted.
        jobs: list[dict[str, Any]] = [j for j in cli.json("jobs", "list") if j["run_id"] is None]
        return jobs if len(jobs) == 7 and all(j["state"] == "succeeded" for j in jobs) else None

    demo = wait_for(demo_done, 120, "the demo jobs to succeed")
    assert {j["task"] for j in demo} == {"hello", "resize_image", "etl", "flaky", "verify", "publish"}
    etl = next(j for j in demo if j["task"] == "etl")
    assert [p["name"] for p in etl["phases"]] == ["extract", "transform", "load"]
    assert all(p["state"] == "succeeded" for p in etl["phases"]) and etl["progress"] == 1.0

    # A job still running at SIGTERM is released back to the queue when the grace period ends.
    long_id = cli("enqueue", "resize_image", "--payload", '{"images": 2000, "delay": 0.05}').stdout.strip()
    wait_for(lambda: cli.json("jobs", "show", long_id)["state"] == "running", 120, "the long job to start")
    up.send_signal(signal.SIGTERM)
    assert up.wait(timeout=30) == 0, cli.output(up)

    jobs = cli.json("jobs", "list")
    assert not [j for j in jobs if j["state"] == "running"]
    long_job = next(j for j in jobs if j["id"] == long_id)
    assert (long_job["state"], long_job["attempt"]) == ("queued", 0)

    shown = cli.output(up)
    assert "enqueued 7 demo jobs" in shown
    for line in (f"{'succeeded':<17} etl", "phase 2/3 transform succeeded", f"{'released':<17} resize_image"):
        assert line in shown, shown
    assert "Traceback" not in shown and " progress " not in shown  # progress says its percentage

    # A second start finds the database in use: no new demo jobs; SIGINT stops it the same way.
    again = cli.spawn("up-again", "up")
    wait_for(lambda: "Ctrl-C to stop" in cli.output(again), 120, "the second start")
    again.send_signal(signal.SIGINT)
    assert again.wait(timeout=30) == 0, cli.output(again)
    assert "demo jobs" not in cli.output(again)
    jobs = cli.json("jobs", "list")
    assert len([j for j in jobs if j["run_id"] is None]) == 8 and not [j for j in jobs if j["state"] == "running"]
    assert [s["name"] for s in cli.json("schedules", "list")] == ["demo-greetings"]  # created once


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_up_runs_your_own_tasks_with_app(cli: Cli) -> None:
    """`up --app` serves one's own engine (API, dashboard, worker, scheduler) in one process: no demo."""
    (cli.cwd / "jobengine.yaml").write_text("database: own.db\npoll_interval: 0.2\napi_port: 0\n")
    (cli.cwd / "myjobs.py").write_text(
        "from jobengine import Engine, JobContext, Settings\n"
        "engine = Engine.from_settings(Settings.load())\n"
        "@engine.task()\n"
        "async def shout(ctx: JobContext) -> str:\n"
        "    return ctx.payload['word'].upper()\n"
    )
    up = cli.spawn("up", "up", "--app", "myjobs:engine", "--concurrency", "2")
    wait_for(lambda: "Ctrl-C to stop" in cli.output(up), 120, "`up --app` to start")
    assert "tasks shout" in cli.output(up) and "demo jobs" not in cli.output(up)
    job_id = cli("enqueue", "shout", "--payload", '{"word": "hi"}', "--db", "own.db").stdout.strip()

    def done() -> dict[str, Any] | None:
        job: dict[str, Any] = cli.json("jobs", "show", job_id, "--db", "own.db")
        return job if job["state"] == "succeeded" else None

    assert wait_for(done, 120, "the job to run on `up --app`")["result"] == "HI"
    up.send_signal(signal.SIGTERM)
    assert up.wait(timeout=60) == 0, cli.output(up)
    assert [j["task"] for j in cli.json("jobs", "list", "--db", "own.db")] == ["shout"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_worker_second_signal_releases_jobs_at_once(cli: Cli) -> None:
    cli("migrate", "--db", "jobs.db")
    job_id = cli("enqueue", "resize_image", "--payload", '{"images": 2000, "delay": 0.05}', "--db", "jobs.db")
    job_id_text = job_id.stdout.strip()
    worker = cli.spawn(
        "worker", "worker", "--app", "jobengine.examples:app", "--db", "jobs.db", "--queues", "media,default",
        "--concurrency", "2", "--lease", "5", "--grace", "120",
    )  # fmt: skip
    wait_for(lambda: cli.json("jobs", "show", job_id_text, "--db", "jobs.db")["state"] == "running", 120, "start")

    worker.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert worker.poll() is None, "the first signal waits for the job (grace period 120s)"
    started = time.monotonic()
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=20) == 0, cli.output(worker)
    assert time.monotonic() - started < 10

    job = cli.json("jobs", "show", job_id_text, "--db", "jobs.db")
    assert (job["state"], job["attempt"]) == ("queued", 0)
    assert "releasing jobs in flight now" in cli.output(worker)
    assert not (cli.cwd / ".jobengine").exists()  # --db replaced the app's default database


def with_engine(database: Path, action: Callable[[Engine], Awaitable[T]]) -> T:
    """Run ``action`` on an engine of the test's own (the CLI under test runs in other processes)."""

    async def go() -> T:
        async with Engine.from_settings(Settings(database=str(database))) as engine:
            return await action(engine)

    return asyncio.run(go())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_worker_sigterm_under_load_leaves_no_job_running(cli: Cli) -> None:
    """A stop lands while claims and reports are in the store's hands: none of them may be lost."""
    database = cli.cwd / "load.db"
    cli.env["JOBENGINE_POLL_INTERVAL"] = "0.05"
    for round_ in range(3):

        async def fill(engine: Engine) -> None:
            await engine.enqueue_many([engine.new_job("hello", {"name": str(i)}) for i in range(300)])

        with_engine(database, fill)
        worker = cli.spawn(f"worker{round_}", "worker", "--app", "jobengine.examples:app", "--db", str(database),
                           "--concurrency", "3")  # fmt: skip
        # Until its signal handlers are installed (it logs that it started); a loaded machine may take a while.
        cli.wait_output(worker, "started on queues", timeout=120)
        time.sleep(0.2 + round_ * 0.3)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, cli.output(worker)

        async def running(engine: Engine) -> list[Job]:
            return await engine.list_jobs(JobFilter(states=(JobState.RUNNING,), limit=1000))

        assert with_engine(database, running) == []

    async def failed(engine: Engine) -> list[Job]:
        return [j for j in await engine.list_jobs(JobFilter(limit=1000)) if j.errors]

    assert with_engine(database, failed) == []  # no attempt was lost to an expired lease
