"""``jobengine health``: the store and both queue transports, one line each; exit 1 when a part is down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobengine.cli.main import main


def test_health_of_a_migrated_database_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "jobs.db")
    assert main(["migrate", "--db", db]) == 0
    capsys.readouterr()
    assert main(["health", "--db", db, "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)
    assert [(p["transport"], p["queue"], p["ok"]) for p in parts] == [
        ("store", "-", True), ("database", "planner", True), ("database", "runner", True),
    ]  # fmt: skip


def test_a_missing_database_is_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["health", "--db", str(tmp_path / "nope.db")]) == 1
    out = capsys.readouterr().out
    assert "down" in out and "does not exist" in out
    assert not (tmp_path / "nope.db").exists()


def test_an_unreachable_broker_is_down_for_both_queues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "jobs.db")
    config = tmp_path / "jobengine.yaml"
    config.write_text("queue:\n  kind: redis\n  redis:\n    url: redis://127.0.0.1:1/0\n")
    assert main(["migrate", "--db", db]) == 0
    capsys.readouterr()
    assert main(["health", "--db", db, "--config", str(config), "--json"]) == 1
    parts = {(p["transport"], p["queue"]): p for p in json.loads(capsys.readouterr().out)}
    assert parts[("store", "-")]["ok"]
    assert not parts[("redis", "planner")]["ok"] and not parts[("redis", "runner")]["ok"]
    assert "127.0.0.1:1" in parts[("redis", "runner")]["detail"]
