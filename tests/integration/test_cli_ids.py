"""Every CLI command that takes an id takes a unique prefix of it, as ``jobs show`` does, on SQLite and on
PostgreSQL (``main()`` in this process): runs, schedules, webhook endpoints and deliveries, API keys and
failure signatures. Tables show short ids; an ambiguous prefix is one error line naming the candidates."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from jobengine.cli.main import main
from jobengine.core.ids import WorkerId, short_id
from jobengine.core.models import AttemptError, FailOutcome, Failure
from jobengine.core.selection import MIN_PREFIX
from jobengine.engine import Engine
from jobengine.secretbox import new_key
from jobengine.settings import Settings
from jobengine.webhooks.dispatcher import WebhookDispatcher
from tests.support.ids import shared_prefix


class Cli:
    def __init__(self, db: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.db, self.capsys = db, capsys

    def __call__(self, *args: str, expect: int = 0) -> tuple[str, str]:
        self.capsys.readouterr()
        code = main([*args, "--db", self.db])
        out, err = self.capsys.readouterr()
        assert code == expect, f"`jobengine {' '.join(args)}` exited {code}\n{out}\n{err}"
        return out, err

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json")[0])


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Cli:  # fmt: skip
    for name in [n for n in os.environ if n.startswith("JOBENGINE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("JOBENGINE_WEBHOOK_ALLOW_HOSTS", "127.0.0.1/32")
    monkeypatch.setenv("JOBENGINE_SECRET_KEYS", new_key())
    db = str(tmp_path / "ids.db") if request.param == "sqlite" else str(request.getfixturevalue("postgres_dsn"))
    runner = Cli(db, capsys)
    runner("migrate")
    return runner


def one_error_line(err: str, *parts: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and all(p in lines[0] for p in parts), err


def test_schedules_and_runs_by_prefix(cli: Cli) -> None:
    ids = [cli.json("schedules", "create", f"s{i}", "--task", "t", "--every", "1h")["id"] for i in range(3)]
    assert cli.json("schedules", "show", short_id(ids[0]))["id"] == ids[0]
    assert cli.json("schedules", "pause", short_id(ids[1]))["enabled"] is False
    assert short_id(ids[0]) in cli("schedules", "list")[0] and ids[0] not in cli("schedules", "list")[0]
    _, err = cli("schedules", "show", shared_prefix(ids)[0], expect=2)
    one_error_line(err, "schedule_id", "give more characters")

    runs = [cli.json("schedules", "trigger", short_id(ids[0]), "--reason", "r")["id"] for _ in range(3)]
    shown = cli.json("runs", "show", short_id(runs[0]))
    assert shown["id"] == runs[0] and {j["run_id"] for j in shown["jobs"]} == {runs[0]}
    parent = shown["jobs"][0]["id"]
    assert cli.json("enqueue", "after", "--depends-on", short_id(parent))["depends_on"] == [parent]
    out, _ = cli("runs", "cancel", short_id(runs[0]))
    assert out.strip() == f"cancelled run {short_id(runs[0])}"
    table = cli("runs", "list")[0]
    assert all(short_id(r) in table and r not in table for r in runs), table
    _, err = cli("runs", "show", shared_prefix(runs)[0], expect=2)
    one_error_line(err, "run_id", "give more characters", *[r for r in runs if r.startswith(shared_prefix(runs)[0])])
    _, err = cli("runs", "show", runs[0][: MIN_PREFIX - 1], expect=1)
    one_error_line(err, "not found", f"at least {MIN_PREFIX} characters")


def test_webhooks_keys_and_signatures_by_prefix(cli: Cli) -> None:
    made = [cli.json("webhooks", "create", "--url", "http://127.0.0.1:9/x", "--tenant", "acme") for _ in range(3)]
    endpoints = [e["id"] for e in made]
    assert cli.json("webhooks", "show", short_id(endpoints[0]), "--tenant", "acme")["id"] == endpoints[0]
    assert cli.json("webhooks", "disable", short_id(endpoints[1]), "--tenant", "acme")["enabled"] is False
    table = cli("webhooks", "list")[0]
    assert all(short_id(e) in table and e not in table for e in endpoints), table
    _, err = cli("webhooks", "show", shared_prefix(endpoints)[0], "--tenant", "acme", expect=2)
    one_error_line(err, "endpoint_id", "give more characters")

    async def deliver_and_fail() -> str:
        """A delivery per endpoint (of a job's creation) and a failure signature."""
        async with Engine.from_settings(Settings(database=cli.db, secret_keys=(os.environ["JOBENGINE_SECRET_KEYS"],),
                                                 webhook_allow_hosts=("127.0.0.1/32",))) as engine:  # fmt: skip
            await engine.enqueue("parse", tenant="acme")
            assert await WebhookDispatcher(engine).fan_out() > 0
            [job] = await engine.transitions.fetch_jobs(["default"], 1, WorkerId("w"), 30.0)
            assert job.lease_token is not None
            error = AttemptError(attempt=1, at=engine.clock.now(), type="ValueError", message="bad row")
            await engine.transitions.fail_jobs([Failure(job.id, job.lease_token, error, FailOutcome.DEAD)])
            return "ok"

    assert asyncio.run(deliver_and_fail()) == "ok"
    delivery = cli.json("webhooks", "deliveries", "--tenant", "acme", "--endpoint", short_id(endpoints[0]))[0]
    assert delivery["endpoint_id"] == endpoints[0]
    out, _ = cli("webhooks", "resend", short_id(delivery["id"]), "--tenant", "acme")
    assert short_id(delivery["id"]) in out
    cli("webhooks", "delete", short_id(endpoints[2]), "--tenant", "acme")
    assert endpoints[2] not in {e["id"] for e in cli.json("webhooks", "list")}

    [sig] = cli.json("signatures", "list", "--tenant", "acme")
    updated = cli.json("signatures", "update", sig["key"][:MIN_PREFIX], "--tenant", "acme", "--status", "resolved")
    assert (updated["key"], updated["status"]) == (sig["key"], "resolved")

    key = cli.json("keys", "create", "--tenant", "acme", "--scope", "jobs:read")
    out, _ = cli("keys", "revoke", key["id"][:MIN_PREFIX])
    assert out.startswith(f"revoked {key['id']}")
    _, err = cli("keys", "revoke", key["id"][: MIN_PREFIX - 1], expect=1)
    one_error_line(err, "api key", "not found", f"at least {MIN_PREFIX} characters")
