"""``jobengine schedules | runs`` end to end in subprocesses, on a SQLite file of the test's own (every
option is exercised in process by ``tests/integration/scheduler/test_cli.py``; here, that the commands are
wired into the real program, print what they say and exit as documented)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_cli import Cli


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
    assert run["id"] in listed and "manual" in listed and "backfill" in listed
