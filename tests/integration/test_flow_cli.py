"""``jobengine flow``: limits set and shown through the CLI, bad values refused naming the field (nothing
written), and an enqueue past the hard limit refused with a message naming the queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobengine.cli.main import main


def test_flow_limits_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "jobs.db")
    assert main(["flow", "set", "mail", "--db", db, "--rate", "5", "--hard-limit", "1"]) == 0
    assert main(["flow", "set", "mail", "--db", db, "--concurrency", "2"]) == 2
    assert "concurrency_key" in capsys.readouterr().err
    assert main(["flow", "set", "media", "--db", db, "--concurrency", "3", "--concurrency-key", "task"]) == 0
    capsys.readouterr()
    assert main(["flow", "list", "--db", db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["mail"]["rate"] == 5 and listed["mail"]["hard_limit"] == 1  # the refused set wrote nothing
    assert listed["media"]["concurrency"] == 3
    assert main(["flow", "list", "--db", db]) == 0
    table = capsys.readouterr().out
    assert "mail" in table and "media" in table
    assert main(["flow", "show", "mail", "--db", db, "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["mail"]
    assert main(["flow", "show", "mall", "--db", db]) == 1
    assert capsys.readouterr().err.strip() == "error: flow limits of queue 'mall' not found"
    assert main(["enqueue", "send", "--queue", "mail", "--db", db]) == 0
    capsys.readouterr()
    assert main(["enqueue", "send", "--queue", "mail", "--db", db]) == 1
    err = capsys.readouterr().err
    assert "queue" in err and "hard limit is 1" in err
    assert main(["flow", "scale", "mail", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["depth"] == 1
    assert main(["flow", "clear", "mail", "--db", db]) == 0
    assert main(["enqueue", "send", "--queue", "mail", "--db", db]) == 0
