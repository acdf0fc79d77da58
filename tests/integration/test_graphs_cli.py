"""``jobengine graphs list | show | cancel | retry`` in process (``cli.main.main``) on a SQLite file of the
test's own, with graphs a real worker ran: the tables, the JSON shapes, and one-line errors with their exit
codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from jobengine import NonRetryable
from jobengine.cli.main import main
from jobengine.core.graphs import GraphState
from jobengine.core.ids import short_id
from jobengine.engine import Engine
from jobengine.engine.canvas import Graph, TaskCall, chain
from jobengine.settings import Settings

TIMEOUT = 30.0


async def prepare(db: str) -> dict[str, str]:
    """Three graphs: ``ok`` succeeded, ``bad`` failed (its middle node dead, the last cancelled), ``open``
    waiting on a task no worker runs."""
    async with Engine.from_settings(Settings(database=db, poll_interval=0.05)) as engine:

        @engine.task
        async def number(n: int) -> int:
            return n

        @engine.task(max_attempts=1)
        async def boom() -> None:
            raise NonRetryable("boom")

        ok = await engine.graphs.submit(chain(number.s(1), number.s(2), name="ok"))
        bad = Graph("bad")
        bad.add("a", number.s(1))
        bad.add("b", boom.s(), after=["a"])
        bad.add("c", number.s(3), after=["b"])
        failed = await engine.graphs.submit(bad)
        opened = await engine.graphs.submit(chain(TaskCall("elsewhere"), number.s(4), name="open"))
        worker = engine.worker(queues=("default",), concurrency=4, poll_interval=0.05)
        running = asyncio.create_task(worker.run())
        try:
            assert (await ok.wait(TIMEOUT)).state is GraphState.SUCCEEDED
            assert (await failed.wait(TIMEOUT)).state is GraphState.FAILED
        finally:
            worker.stop()
            await asyncio.wait_for(running, TIMEOUT)
        return {"ok": ok.id, "bad": failed.id, "open": opened.id}


class Cli:
    def __init__(self, db: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.db = db
        self.capsys = capsys

    def __call__(self, *args: str, expect: int = 0) -> tuple[str, str]:
        self.capsys.readouterr()
        code = main([*args, "--db", self.db])
        out = self.capsys.readouterr()
        assert code == expect, f"`jobengine {' '.join(args)}` exited {code}\n{out.out}\n{out.err}"
        return out.out, out.err

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json")[0])


@pytest.mark.timeout(120)
def test_graphs_list_show_cancel_and_retry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "jobs.db")
    ids = asyncio.run(prepare(db))
    cli = Cli(db, capsys)

    listed = cli.json("graphs", "list")
    assert [(g["name"], g["state"], g["done"], g["total"]) for g in listed] == [
        ("open", "pending", 0, 2), ("bad", "failed", 3, 3), ("ok", "succeeded", 2, 2),
    ]  # fmt: skip
    assert [g["id"] for g in listed] == [ids["open"], ids["bad"], ids["ok"]] and listed[0]["nodes"] is None
    assert [g["name"] for g in cli.json("graphs", "list", "--limit", "1")] == ["open"]
    assert cli.json("graphs", "list", "--tenant", "globex") == []
    table = cli("graphs", "list")[0].splitlines()
    assert table[0].split() == ["ID", "STATE", "NODES", "PROGRESS", "CREATED", "TOOK", "NAME"]
    bad_line = next(line for line in table if line.startswith(ids["bad"]))
    assert bad_line.split()[1:4] == ["failed", "3/3", "100%"] and bad_line.split()[-1] == "bad"

    shown = cli.json("graphs", "show", ids["bad"])
    assert shown["state"] == "failed" and shown["counts"] == {"succeeded": 1, "dead": 1, "cancelled": 1}
    states = {n["name"]: (n["job"]["state"], n["parents"]) for n in shown["nodes"]}
    assert states == {"a": ("succeeded", []), "b": ("dead", ["a"]), "c": ("cancelled", ["b"])}
    text = cli("graphs", "show", ids["bad"])[0]
    assert "nodes: 1 cancelled, 1 dead, 1 succeeded" in text
    b_job = next(n["job"]["id"] for n in shown["nodes"] if n["name"] == "b")
    b_line = next(line for line in text.splitlines() if line.startswith("b "))
    assert b_line.split() == ["b", "boom", "dead", short_id(b_job), "1/1", "cancel", "a"]

    # Retry keeps what succeeded and reruns the rest; a graph that did not fail cannot be retried.
    out = cli("graphs", "retry", ids["bad"])[0]
    assert out.strip() == f"retrying graph {ids['bad']}: 2 node(s) run again, 1 succeeded kept"
    again = {n["name"]: n["job"]["state"] for n in cli.json("graphs", "show", ids["bad"])["nodes"]}
    assert again["a"] == "succeeded" and again["b"] == "queued"
    err = cli("graphs", "retry", ids["ok"], expect=1)[1]
    assert err.strip() == f"error: graph {ids['ok']} is succeeded; only a failed or cancelled graph can be retried"

    cancelled = cli.json("graphs", "cancel", ids["open"])
    assert cancelled["state"] == "cancelled" and cancelled["counts"] == {"cancelled": 2}
    err = cli("graphs", "cancel", ids["open"], expect=1)[1]
    assert err.strip() == f"error: graph {ids['open']} already cancelled; nothing to cancel"

    assert (
        cli("graphs", "show", "nope", expect=1)[1].strip()
        == "error: graph 'nope' not found (an id prefix needs at least 8 characters)"
    )
    assert "--limit" in cli("graphs", "list", "--limit", "0", expect=2)[1]
