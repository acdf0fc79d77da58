"""A fleet of ``jobengine worker`` processes running tests/support/fleet_app.py on one transport, with the
outside ledger those workers write (shared by the fleet and stop tests).

``fleet_for`` builds one for ``kind``: ``sqlite`` or ``postgres`` (the database transport), ``redis`` or
``nats`` (PostgreSQL store, broker delivery, on streams or a db number of the test's own)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobengine.settings import Settings
from support.processes import Processes
from support.services import drop_nats_streams, unique_name

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.support.fleet_app:app"


@dataclass
class Fleet:
    procs: Processes
    settings: Settings
    ledger: Path

    def worker(self, tasks: str, *args: str) -> subprocess.Popen[bytes]:
        return self.procs.spawn(f"worker{len(self.procs.procs)}", "worker", "--app", APP, *args,
                                env={"FLEET_TASKS": tasks})  # fmt: skip

    def ready(self, p: subprocess.Popen[bytes]) -> None:
        self.procs.wait_output(p, "started on queues", 120)

    def lines(self) -> list[list[str]]:
        if not self.ledger.exists():
            return []
        return [line.split() for line in self.ledger.read_text().splitlines() if line.strip()]


def nats_yaml(name: str) -> str:
    up = name.upper()
    return f"""queue:
  kind: nats
  nats:
    planner: {{stream: P_{up}, subject: {name}.planner, durableConsumer: {name}-planners,
              deadLetterStream: P_{up}_DEAD, deadLetterSubject: {name}.planner.dead}}
    runner: {{stream: R_{up}, subject: {name}.runner, durableConsumer: {name}-runners,
             deadLetterStream: R_{up}_DEAD, deadLetterSubject: {name}.runner.dead}}
"""


async def drop_fleet_streams(name: str) -> None:
    """The streams of :func:`nats_yaml`'s queues."""
    up = name.upper()
    await drop_nats_streams("nats://127.0.0.1:4222", (f"P_{up}", f"P_{up}_DEAD", f"R_{up}", f"R_{up}_DEAD"))


@contextlib.asynccontextmanager
async def fleet_for(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, settings: dict[str, str]
) -> AsyncIterator[Fleet]:
    """A fleet on ``kind`` with ``settings`` (``JOBENGINE_*`` variables) on top; every process it started
    is SIGKILLed on the way out, and NATS streams it made are dropped."""
    database = str(tmp_path / "jobs.db") if kind == "sqlite" else request.getfixturevalue("postgres_dsn")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBENGINE_DATABASE": database,
           "LEDGER": str(tmp_path / "ledger.txt"), **settings}  # fmt: skip
    nats_name = ""
    if kind == "redis":
        env["JOBENGINE_QUEUE_KIND"] = "redis"
        env["JOBENGINE_QUEUE_REDIS_URL"] = request.getfixturevalue("redis_url")
    elif kind == "nats":
        request.getfixturevalue("nats_url")  # skips (fails under CI) without NATS
        nats_name = unique_name("fleet").replace("_", "-")
        (tmp_path / "jobengine.yaml").write_text(nats_yaml(nats_name))
    config = tmp_path / "jobengine.yaml" if nats_name else None
    procs = Processes(tmp_path, env, tmp_path)
    try:
        yield Fleet(procs, Settings.load(config, env), tmp_path / "ledger.txt")
    finally:
        procs.stop_all()
        if nats_name:
            await drop_fleet_streams(nats_name)
