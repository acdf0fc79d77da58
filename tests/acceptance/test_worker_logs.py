"""What a ``jobengine worker`` process says, read from its output: the start-up lines name the store and the
transport; a task that raises KeyError until its job is dead leaves its traceback in the output, at WARNING
for each retried attempt and at ERROR for the last, in text and in JSON lines (each one parses)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from acceptance.conftest import Procs
from support.waiting import wait_for


def run_until_dead(procs: Procs, *flags: str) -> tuple[str, dict[str, str]]:
    """Enqueue a failing job and a good one, run a worker (with ``flags`` before the command) until the
    failing job is dead, stop it; its output and the two job ids."""
    ids = {
        task: procs_cli(procs, "enqueue", task, "--payload", payload)
        for task, payload in (("lookup", '{"key": "missing"}'), ("greet", '{"name": "Ada"}'))
    }
    worker = procs.spawn("worker", *flags, "worker", "--app", "tests.support.logs_app:app")
    wait_for(lambda: procs_cli(procs, "jobs", "show", ids["lookup"], "--json", parse=True)["state"] == "dead",
             120, "the failing job to go dead")  # fmt: skip
    wait_for(lambda: procs_cli(procs, "jobs", "show", ids["greet"], "--json", parse=True)["state"] == "succeeded",
             120, "the good job")  # fmt: skip
    # Its end lines are written before its outcome is reported, so they are in the output by now.
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, procs.output(worker)
    return procs.output(worker), ids


def procs_cli(procs: Procs, *args: str, parse: bool = False) -> Any:
    import sys

    done = subprocess.run([sys.executable, "-m", "jobengine", *args], env=procs.env, cwd=procs.cwd,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return json.loads(done.stdout) if parse else done.stdout.strip()


@pytest.mark.slow
def test_the_text_log_names_the_store_and_shows_every_failure(procs: Procs, tmp_path: Path) -> None:
    out, ids = run_until_dead(procs)
    start = out[out.index("started on queues") :]
    assert f"store        sqlite {tmp_path / 'jobs.db'}" in start
    assert "transport    database (the store)" in start
    assert "tasks        greet, lookup" in start

    lines = out.splitlines()
    retried = [line for line in lines if " WARNING " in line and "(lookup) failed" in line]
    dead = [line for line in lines if " ERROR " in line and "(lookup) failed" in line]
    assert len(retried) == 2 and len(dead) == 1, out
    assert all("KeyError: 'missing'" in line for line in retried + dead), out
    assert out.count("Traceback (most recent call last):") == 3, out
    assert 'in lookup\n    return table[ctx.payload["key"]]' in out
    succeeded = [line for line in lines if " INFO " in line and "(greet) succeeded" in line]
    assert len(succeeded) == 1, out
    assert ids["greet"] not in succeeded[0]  # the short form: the listing's
    assert "(attempt 1 of 3)" in succeeded[0]


@pytest.mark.slow
def test_the_json_log_is_one_object_per_line_with_the_job_fields(procs: Procs) -> None:
    out, ids = run_until_dead(procs, "--log-format", "json")
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)

    [start] = [r for r in records if r["message"].startswith("worker ") and "started" in r["message"]]
    assert start["store"].startswith("sqlite ") and start["transport"] == "database (the store)"
    assert start["tasks"] == ["greet", "lookup"] and start["queues"] == ["default"]

    # Each attempt ends with its line; a start has a line of its own only when the attempt was still running
    # 0.1 s after it began, which these quick attempts are not, unless the machine is very busy.
    failing = [r for r in records if r.get("job_id") == ids["lookup"] and r["outcome"] != "started"]
    assert [(r["level"], r["outcome"], r["attempt"]) for r in failing] == [
        ("WARNING", "retry", 1), ("WARNING", "retry", 2), ("ERROR", "dead", 3),
    ]  # fmt: skip
    for r in failing:
        assert r["task"] == "lookup" and isinstance(r["duration_ms"], int)
        assert r["exc_info"].startswith("Traceback (most recent call last):")
        assert r["exc_info"].rstrip().endswith("KeyError: 'missing'")
    [good] = [r for r in records if r.get("job_id") == ids["greet"] and r["outcome"] == "succeeded"]
    assert good["level"] == "INFO" and "exc_info" not in good


def test_a_bad_log_format_is_one_line_naming_the_option(procs: Procs) -> None:
    p = procs.spawn("bad", "--log-format", "xml", "jobs", "list")
    assert p.wait(timeout=120) == 2
    assert procs.output(p).strip() == "error: log_format: one of text, json, not 'xml'"
