"""``jobengine schedules | runs`` end to end in subprocesses, on a SQLite file of the test's own (every
option is exercised in process by ``tests/integration/scheduler/test_cli.py``; here, that the commands are
wired into the real program, print what they say and exit as documented)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobengine.core.ids import short_id

from .test_cli import Cli, assert_one_error_line, cli, wait_for

__all__ = ["cli"]  # the fixture, shared with test_cli.py


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_create_trigger_list_and_a_refused_expression(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    out = cli("schedules", "create", "nightly", "--task", "report", "--cron", "30 2 * * *", "--tz", "Europe/Paris",
              "--items", '["eu", "us", "ap"]', "--segment-size", "2").stdout  # fmt: skip
    assert out.startswith("created schedule nightly (") and "next run" in out
    bad = cli("schedules", "create", "x", "--task", "t", "--cron", "61 * * * *", expect=2)
    assert bad.stderr.strip() == "error: cron: '61 * * * *': bad minute field '61' (allowed: 0-59, with , - / and *)"
    run = cli.json("schedules", "trigger", "nightly", "--reason", "backfill")
    assert (run["trigger"], run["summary"]["total"], run["actor"].startswith("cli")) == ("manual", 2, True)
    listed = cli("runs", "list", "--schedule", "nightly").stdout
    assert short_id(run["id"]) in listed and "manual" in listed and "backfill" in listed


@pytest.mark.timeout(300)
def test_a_schedule_of_a_task_no_live_worker_runs_is_warned_or_refused(cli: Cli) -> None:
    early = cli("schedules", "create", "early", "--task", "report", "--every", "1h")
    assert early.stderr == ""  # no worker registered yet: nothing says the task is unknown
    worker = cli.spawn("worker", "worker", "--app", "jobengine.examples:app")
    wait_for(lambda: cli.json("workers"), 120, "the worker to register")
    warned = cli("schedules", "create", "nightly", "--task", "report", "--every", "1h")
    assert warned.stdout.startswith("created schedule nightly (")
    assert warned.stderr.strip() == "warning: no live worker runs task 'report'"
    assert cli("schedules", "create", "greet", "--task", "hello", "--every", "1h").stderr == ""
    assert cli("schedules", "update", "greet", "--task", "report").stderr.startswith("warning: no live worker")
    (cli.cwd / "jobengine.yaml").write_text("refuse_unknown_tasks: true\n")
    refused = cli("schedules", "create", "weekly", "--task", "report", "--every", "1h", expect=2)
    assert_one_error_line(refused, "task: no worker runs task 'report' (refuse_unknown_tasks is on)")
    assert "weekly" not in cli("schedules", "list").stdout
    worker.terminate()
    assert worker.wait(timeout=60) == 0, cli.output(worker)
