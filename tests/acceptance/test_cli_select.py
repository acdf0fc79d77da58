"""``jobengine jobs`` with id prefixes, search options and bulk actions, as subprocesses, on SQLite and
on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobengine.core.ids import short_id

from .test_cli import Cli, assert_one_error_line


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "select.db") if request.param == "sqlite" else str(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(tmp_path)
    yield runner
    runner.stop_all()


def test_prefixes_search_and_a_bulk_cancel_by_filter(cli: Cli, db: str) -> None:
    cli("migrate", "--db", db)
    ada = cli("enqueue", "greet", "--payload", '{"name": "Ada"}', "--db", db).stdout.strip()
    for n in range(3):
        cli("enqueue", "mail", "--payload", f'{{"n": {n}}}', "--db", db)
    shown = cli.json("jobs", "show", short_id(ada), "--db", db)
    assert shown["id"] == ada
    found = cli.json("jobs", "list", "--payload", "Ada", "--db", db)
    assert [j["id"] for j in found] == [ada]
    assert [j["id"] for j in cli.json("jobs", "list", "--id", short_id(ada), "--db", db)] == [ada]
    assert cli.json("jobs", "list", "--created-after", "2100-01-01T00:00:00+00:00", "--db", db) == []
    table = cli("jobs", "list", "--db", db).stdout
    assert short_id(ada) in table and ada not in table

    # by filter: refused without --yes when nobody can answer the question, then done with it
    refused = cli("jobs", "cancel", "--state", "queued", "--task", "mail", "--db", db, expect=2)
    assert_one_error_line(refused, "yes", "3 jobs match")
    done = cli("jobs", "cancel", "--state", "queued", "--task", "mail", "--yes", "--db", db).stdout
    assert "cancelled 3 of 3 jobs" in done
    states = {j["task"]: j["state"] for j in cli.json("jobs", "list", "--db", db)}
    assert states == {"mail": "cancelled", "greet": "queued"}
    report = cli.json("jobs", "retry", "--task", "mail", "--yes", "--db", db)
    assert (report["changed"], report["refused_count"]) == (3, 0)
    # nothing to select, a bad option, an unknown prefix: one line each
    assert_one_error_line(cli("jobs", "cancel", "--db", db, expect=2), "id", "give job ids")
    assert_one_error_line(cli("jobs", "list", "--state", "lost", "--db", db, expect=2), "state")
    assert_one_error_line(cli("jobs", "list", "--created-after", "soon", "--db", db, expect=2), "created_after")
    assert_one_error_line(cli("jobs", "show", "ffffffff-ffff", "--db", db, expect=1), "not found")


def test_an_ambiguous_prefix_names_its_candidates(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "amb.db")
    cli("migrate", "--db", db)
    ids = [cli("enqueue", "t", "--db", db).stdout.strip() for _ in range(2)]
    common = ids[0][:8]  # the same 65-second window, unless the test straddles one
    if ids[1].startswith(common):
        proc = cli("jobs", "show", common, "--db", db, expect=2)
        assert_one_error_line(proc, "job_id", ids[0], ids[1], "give more characters")
