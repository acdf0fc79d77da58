"""The CLI's edge: input out of core.bounds is a one-line error naming the field (exit 2, as any bad input),
nothing is stored, and a row stored out of the bounds still lists and shows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jobengine.cli.main import main
from jobengine.core.models import NewJob
from jobengine.engine import Engine
from jobengine.settings import Settings

REFUSED = [
    (["--run-at", "9999-12-31T23:59:59-23:59"], "run_at"),
    (["--run-at", "0001-01-01T00:00:00+23:59"], "run_at"),
    (["--payload", '"\\ud800"'], "payload"),
    (["--payload", '{"\\udc00": 1}'], "payload"),
    (["--payload", '{"a": "\\u0000"}'], "payload"),
    (["--priority", str(2**64)], "priority"),
    (["--delay", "1e300"], "delay"),
]


@pytest.mark.parametrize(("args", "field"), REFUSED)
def test_input_out_of_the_bounds_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str
) -> None:
    db = str(tmp_path / "jobs.db")
    assert main(["migrate", "--db", db]) == 0
    capsys.readouterr()
    assert main(["enqueue", "t", "--db", db, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: {field}: "), err
    assert main(["jobs", "list", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_row_stored_out_of_the_bounds_lists_and_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "jobs.db")
    job = NewJob("late")
    job.run_at = 253402387139.0  # type: ignore[misc]  # as a row stored before the bounds

    async def store() -> None:
        async with Engine.from_settings(Settings(database=db)) as engine:
            await engine.enqueue_many([job])

    asyncio.run(store())
    assert main(["jobs", "list", "--db", db]) == 0
    assert main(["jobs", "list", "--db", db, "--json"]) == 0
    assert main(["jobs", "show", job.id, "--db", db]) == 0
    assert "9998-12-31" in capsys.readouterr().out
