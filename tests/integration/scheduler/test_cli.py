"""``jobengine schedules | runs | signatures`` in process (``cli.main.main``), on a SQLite file of the test's
own: every command and option, the JSON shapes, the one-line errors and their exit codes. The same commands
run in subprocesses in ``tests/acceptance/test_scheduler_cli.py``."""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobengine.cli.main import main
from jobengine.core.ids import WorkerId, short_id
from jobengine.core.models import Completion
from jobengine.core.runs import RunFilter
from jobengine.engine import Engine
from jobengine.settings import Settings


@dataclass
class Result:
    stdout: str
    stderr: str


class InProcessCli:
    """``jobengine`` commands run by ``main()`` in this process, on ``.jobengine/jobengine.db`` of a temp dir."""

    def __init__(self, cwd: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys = capsys
        monkeypatch.chdir(cwd)
        for name in [n for n in os.environ if n.startswith("JOBENGINE_")]:
            monkeypatch.delenv(name)

    def __call__(self, *args: str, expect: int = 0) -> Result:
        self.capsys.readouterr()
        code = main(list(args))
        out = self.capsys.readouterr()
        assert code == expect, f"`jobengine {' '.join(args)}` exited {code}\n{out.out}\n{out.err}"
        return Result(out.out, out.err)

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> InProcessCli:
    return InProcessCli(tmp_path, capsys, monkeypatch)


@pytest.mark.timeout(300)
def test_schedules_from_create_to_delete(cli: InProcessCli, tmp_path: Path) -> None:
    cli("migrate")
    created = cli.json(
        "schedules", "create", "nightly", "--task", "report", "--cron", "30 2 * * *", "--tz", "Europe/Paris",
        "--items", '["eu", "us", "ap"]', "--segment-size", "2", "--overlap", "skip", "--misfire", "catch_up",
        "--catch-up", "3", "--jitter", "1m", "--actor", "alice",
    )  # fmt: skip
    assert (created["name"], created["cron"], created["timezone"], created["overlap"]) == (
        "nightly", "30 2 * * *", "Europe/Paris", "skip")  # fmt: skip
    assert (created["misfire"], created["catch_up"], created["jitter"], created["created_by"]) == (
        "catch_up", 3, 60.0, "alice")  # fmt: skip
    assert created["template"]["items"] == ["eu", "us", "ap"] and created["next_fire_at"].endswith(":30:00.000+00:00")

    # What is wrong is said in one line, exit 2.
    bad = cli("schedules", "create", "x", "--task", "t", "--cron", "61 * * * *", expect=2)
    assert bad.stderr.strip() == "error: cron: '61 * * * *': bad minute field '61' (allowed: 0-59, with , - / and *)"
    bad = cli("schedules", "create", "x", "--task", "t", "--every", "1h", "--tz", "Europe/Pariss", expect=2)
    assert "timezone: unknown IANA time zone 'Europe/Pariss'" in bad.stderr
    assert "already exists" in cli("schedules", "create", "nightly", "--task", "t", "--every", "1h", expect=2).stderr
    neither = cli("schedules", "create", "x", "--task", "t", expect=2).stderr
    assert neither.strip() == "error: cron: give --cron (a CRON expression) or --every (an interval)"
    both = cli("schedules", "create", "x", "--task", "t", "--cron", "* * * * *", "--every", "1h", expect=2).stderr
    assert both.strip() == "error: cron: give --cron or --every, not both"

    # Fire times in the schedule's zone with its offset (+01:00 in winter, +02:00 in summer), UTC beside.
    rows = cli("schedules", "simulate", "nightly", "--count", "2").stdout.splitlines()
    assert "FIRES AT (Europe/Paris)" in rows[0] and "UTC" in rows[0]
    assert all(re.search(r" 02:30:00\+0[12]:00 +\S+ 0[01]:30:00\+00:00 ", row) for row in rows[1:3]), rows
    rows = cli("schedules", "simulate", "nightly", "--count", "2", "--utc").stdout.splitlines()
    assert "FIRES AT (UTC)" in rows[0] and "Paris" not in rows[0]
    assert all(re.search(r" 0[01]:30:00\+00:00 ", row) and "02:30" not in row for row in rows[1:3]), rows
    simulated = cli.json("schedules", "simulate", "nightly", "--count", "3")
    assert len(simulated["fire_times"]) == 3
    assert [len(r["jobs"]) for r in simulated["runs"]] == [2, 2, 2]
    assert simulated["runs"][0]["jobs"][0]["payload"] == {"items": ["eu", "us"], "segment": 0, "segments": 2}
    # A proposed schedule needs no database: none is created.
    proposal = cli("schedules", "simulate", "--task", "t", "--every", "15m", "--count", "2", "--db", "none.db")
    assert "FIRES AT" in proposal.stdout and not (tmp_path / "none.db").exists()

    updated = cli.json(
        "schedules", "update", "nightly", "--every", "1h", "--payload", '{"full": true}', "--actor", "bob"
    )
    assert (updated["cron"], updated["every"], updated["version"], updated["updated_by"]) == (None, 3600.0, 2, "bob")
    assert updated["template"]["payload"] == {"full": True} and updated["template"]["items"] == ["eu", "us", "ap"]

    triggered = cli.json("schedules", "trigger", "nightly", "--reason", "backfill", "--actor", "carol")
    assert (triggered["trigger"], triggered["actor"], triggered["summary"]["total"]) == ("manual", "carol", 2)
    listed = cli.json("runs", "list", "--schedule", "nightly", "--trigger", "manual")
    assert [r["id"] for r in listed] == [triggered["id"]]
    shown = cli.json("runs", "show", triggered["id"])
    assert [j["payload"]["items"] for j in shown["jobs"]] == [["eu", "us"], ["ap"]]
    assert [s["items"] for s in shown["segments"]] == [2, 1]
    cancelled = cli.json("runs", "cancel", triggered["id"], "--actor", "dave")
    assert cancelled["state"] == "cancelled" and cancelled["summary"]["cancelled"] == 2
    retried = cli.json("runs", "retry", triggered["id"])
    assert (retried["trigger"], retried["parent_id"], retried["summary"]["total"]) == ("retry", triggered["id"], 2)
    assert "cancelled" in cli("runs", "list", "--state", "cancelled").stdout

    assert cli.json("schedules", "pause", "nightly")["enabled"] is False
    assert cli.json("schedules", "resume", "nightly")["enabled"] is True
    table = cli("schedules", "list").stdout
    assert "nightly" in table and "every 3600s" in table
    cli("schedules", "delete", "nightly")
    assert "not found" in cli("schedules", "show", "nightly", expect=1).stderr

    async def audit() -> list[tuple[str, str]]:
        async with Engine.from_settings(Settings(database=str(tmp_path / ".jobengine" / "jobengine.db"))) as engine:
            assert len(await engine.runs.list(RunFilter())) == 2  # runs stay after their schedule is deleted
            events = await engine.events(limit=10_000)
            return [(e.type, str(e.data.get("actor"))) for e in events if not e.type.startswith("job.")]

    trail = asyncio.run(audit())
    for entry in [("schedule.created", "alice"), ("schedule.updated", "bob"), ("run.created", "carol"),
                  ("run.cancelled", "dave")]:  # fmt: skip
        assert entry in trail
    assert [t for t, _ in trail if t.startswith("schedule.")][-3:] == [
        "schedule.paused", "schedule.resumed", "schedule.deleted"]  # fmt: skip
    assert json.loads(cli("signatures", "list", "--json").stdout) == []


def test_runs_list_keeps_each_run_on_one_line_at_130_columns(
    cli: InProcessCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli("schedules", "create", "nightly", "--task", "report", "--cron", "30 2 * * *", "--items", '["eu", "us"]',
        "--segment-size", "1")  # fmt: skip
    reason = "backfill of the European and American regions after the outage of the night before"
    ids = [cli.json("schedules", "trigger", "nightly", "--reason", reason)["id"] for _ in range(3)]
    cli("runs", "cancel", ids[0])
    monkeypatch.setenv("COLUMNS", "130")  # what rich sizes its tables to
    lines = cli("runs", "list").stdout.splitlines()
    assert len(lines) == 1 + len(ids), "\n".join(lines)  # a header, then one line per run: nothing wrapped
    assert all(len(line) <= 130 for line in lines), "\n".join(lines)
    for line, run_id in zip(lines[1:], reversed(ids), strict=True):  # newest first, each by its short id
        assert line.startswith(short_id(run_id) + " ") and run_id not in line and "manual" in line, line
    assert all("backfill of the" in line and line.rstrip().endswith("…") for line in lines[1:3]), lines  # cut short
    assert "cancelled" in lines[-1]


@pytest.mark.timeout(300)
def test_runs_start_a_request_preview_it_and_name_bad_fields(cli: InProcessCli, tmp_path: Path) -> None:
    cli("migrate")
    (tmp_path / "items.json").write_text('["c", "d"]')
    args = ("runs", "start", "score", "--items", '["b", "a"]', "--items-file", "items.json", "--mode", "incremental",
            "--priority", "high", "--env", "region=eu", "--run-id", "night-1", "--segment-size", "3")  # fmt: skip
    preview = cli.json(*args, "--preview")
    assert (preview["todo"], preview["segments"], preview["sample"], preview["cursor"]) == (4, 2, ["a", "b", "c", "d"],
                                                                                            None)  # fmt: skip
    assert cli.json("runs", "list") == []  # a preview starts nothing
    run = cli.json(*args)
    assert (run["id"], run["trigger"], run["items"], run["summary"]["total"]) == ("night-1", "request", 4, 2)
    assert cli.json(*args)["id"] == "night-1"  # the same request again: the same run
    assert len(cli.json("runs", "list")) == 1
    assert "different request" in cli("runs", "start", "score", "--run-id", "night-1", expect=1).stderr
    assert cli("runs", "start", "score", "--mode", "sometimes", expect=2).stderr.startswith("error: mode: ")
    assert cli("runs", "start", "score", "--env", "region", expect=2).stderr.startswith("error: env: ")
    assert cli("runs", "start", "score", "--items", "{}", expect=2).stderr.startswith("error: items: ")
    overlap = cli("runs", "start", "score", "--items", '["e"]', "--mode", "incremental", expect=1).stderr
    assert "already has incremental run night-1" in overlap  # night-1 is still queued
    cli("runs", "start", "score", "--items", '["e"]', "--mode", "simulate")
    assert [r["id"] for r in cli.json("runs", "list", "--mode", "incremental")] == ["night-1"]
    assert [r["mode"] for r in cli.json("runs", "list", "--mode", "simulate")] == ["simulate"]
    assert cli("runs", "list", "--mode", "often", expect=2).stderr.startswith("error: mode: ")


@pytest.mark.timeout(300)
def test_runs_diff_and_replay(cli: InProcessCli, tmp_path: Path) -> None:
    cli("migrate")

    async def finish(result: int) -> None:
        """Complete every queued job as a worker would, each item's result ``item + result``."""
        async with Engine.from_settings(Settings(database=str(tmp_path / ".jobengine" / "jobengine.db"))) as engine:
            jobs = await engine.transitions.fetch_jobs(["default"], 100, WorkerId("w"), 300)
            await engine.transitions.complete_jobs([
                Completion(j.id, j.lease_token or "", [i + (result if i == 2 else 0) for i in j.payload["items"]])
                for j in jobs
            ])  # fmt: skip

    full = cli.json("runs", "start", "score", "--items", "[1, 2, 3]")
    asyncio.run(finish(0))
    assert "not a simulate run" in cli("runs", "diff", full["id"], expect=1).stderr
    sim = cli.json("runs", "start", "score", "--items", "[1, 2, 3]", "--mode", "simulate")
    asyncio.run(finish(5))
    diff = cli.json("runs", "diff", sim["id"])
    assert (diff["base_run_id"], diff["counts"]["changed"], diff["entries"]) == (
        full["id"], 1, [{"item": 2, "change": "changed", "before": 2, "after": 7}]
    )  # fmt: skip
    text = cli("runs", "diff", sim["id"], "--same").stdout
    assert "2 same, 1 changed, 0 new, 0 gone" in text and "changed" in text
    replay = cli.json("runs", "replay", full["id"], "--reason", "again")
    assert (replay["parent_id"], replay["items"], replay["state"]) == (full["id"], 3, "queued")
    assert "replays" in cli("runs", "replay", full["id"]).stdout


@pytest.mark.timeout(300)
def test_a_schedule_of_a_graph_from_a_json_file(cli: InProcessCli, tmp_path: Path) -> None:
    cli("migrate")
    body = {
        "name": "etl",
        "nodes": [{"name": "extract", "task": "extract"}, {"name": "load", "task": "load", "policy": "continue"}],
        "edges": [["extract", "load"]],
    }
    (tmp_path / "etl.json").write_text(json.dumps(body))
    created = cli.json("schedules", "create", "nightly", "--graph", "etl.json", "--cron", "0 2 * * *")
    assert created["template"]["name"] == "etl" and created["template"]["edges"] == [["extract", "load"]]
    assert "graph etl" in cli("schedules", "list").stdout
    run = cli.json("schedules", "trigger", "nightly", "--reason", "now")
    assert run["summary"]["total"] == 2
    assert cli.json("graphs", "show", run["id"])["name"] == "etl"  # the run's graph has its id
    bad = cli("schedules", "create", "both", "--graph", "etl.json", "--task", "t", "--cron", "0 2 * * *", expect=2)
    assert "graph" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    missing = cli("schedules", "create", "none", "--graph", "nope.json", "--cron", "0 2 * * *", expect=2)
    assert "graph" in missing.stderr and "nope.json" in missing.stderr
    (tmp_path / "cycle.json").write_text(json.dumps({**body, "edges": [["extract", "load"], ["load", "extract"]]}))
    cycle = cli("schedules", "create", "cyc", "--graph", "cycle.json", "--cron", "0 2 * * *", expect=2)
    assert "template.edges" in cycle.stderr
    refused = cli("schedules", "update", "nightly", "--queue", "q", expect=2)
    assert "fires a graph" in refused.stderr
    updated = cli.json("schedules", "update", "nightly", "--task", "plain")
    assert updated["template"]["task"] == "plain"
    again = cli.json("schedules", "update", "nightly", "--graph", "etl.json")
    assert again["template"]["name"] == "etl"


@pytest.mark.timeout(300)
def test_a_schedule_of_a_run_request_from_a_json_file(cli: InProcessCli, tmp_path: Path) -> None:
    cli("migrate")
    body = {"task": "score", "mode": "incremental", "source": "accounts", "items": [1, 2, 3], "segment_size": 2}
    (tmp_path / "score.json").write_text(json.dumps(body))
    created = cli.json("schedules", "create", "score", "--request", "score.json", "--every", "1h")
    assert (created["template"]["mode"], created["template"]["source"]) == ("incremental", "accounts")
    assert "score (incremental)" in cli("schedules", "list").stdout
    run = cli.json("schedules", "trigger", "score", "--reason", "now")
    assert (run["schedule_id"], run["summary"]["total"]) == ("score accounts", 2)
    assert run["id"][:8] in cli("schedules", "show", "score").stdout  # its stream's runs
    busy = cli("schedules", "trigger", "score", "--reason", "again", expect=1)
    assert "incremental run" in busy.stderr
    (tmp_path / "bad.json").write_text(json.dumps({**body, "mode": "sometimes"}))
    bad = cli("schedules", "create", "bad", "--request", "bad.json", "--every", "1h", expect=2)
    assert "template.mode" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    both = cli("schedules", "create", "both", "--request", "score.json", "--task", "t", "--every", "1h", expect=2)
    assert "request" in both.stderr and len(both.stderr.strip().splitlines()) == 1
    refused = cli("schedules", "update", "score", "--queue", "q", expect=2)
    assert "starts a run request" in refused.stderr
