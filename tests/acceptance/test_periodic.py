"""Schedules declared in code, end to end: three ``jobengine scheduler --app`` processes of one app file,
started together again and again. The same declarations leave one schedule each, version unchanged; a
cron changed in the file updates its schedule once (version + 1, one audit event)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from jobengine.core.schedules import ScheduleFilter
from jobengine.engine import Engine
from jobengine.settings import Settings

from .conftest import ROOT, Procs

APP = """
from jobengine import Engine, Settings

engine = Engine.from_settings(Settings.load())


@engine.periodic("{cron}", tz="Europe/Paris")
@engine.task(queue="reports")
async def send_report(kind: str = "short") -> str:
    return kind


engine.periodic(every="1h", task=send_report, name="hourly-report", kwargs={{"kind": "full"}})
"""


def start_three_schedulers(procs: Procs, tmp_path: Path, cron: str) -> None:
    """Write the app with ``cron``, start three schedulers of it at once, wait until each is up (the
    declarations are synced before a scheduler says it started), then stop them."""
    (tmp_path / "periodic_app.py").write_text(APP.format(cron=cron))
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}
    started = [procs.spawn(f"scheduler{len(procs.procs)}", "scheduler", "--app", "periodic_app:engine", env=env)
               for _ in range(3)]  # fmt: skip
    for p in started:
        procs.wait_output(p, "scheduler started", timeout=120)
    for p in started:
        p.send_signal(signal.SIGTERM)
    for p in started:
        assert p.wait(timeout=60) == 0, procs.output(p)


async def declared_twice_then_changed(procs: Procs, tmp_path: Path, database: str) -> None:
    async def state() -> tuple[dict[str, tuple[int, str | None]], list[tuple[str, str, object]]]:
        async with Engine.from_settings(Settings(database=database)) as engine:
            schedules = {s.name: (s.version, s.spec.cron) for s in await engine.schedules.list(ScheduleFilter())}
            events = [(e.type, str(e.data["name"]), e.data["actor"]) for e in await engine.events(limit=10_000)
                      if e.type.startswith("schedule.")]  # fmt: skip
            return schedules, events

    start_three_schedulers(procs, tmp_path, "0 8 * * *")
    created = [("schedule.created", "send_report", "code"), ("schedule.created", "hourly-report", "code")]
    schedules, events = await state()
    assert schedules == {"send_report": (1, "0 8 * * *"), "hourly-report": (1, None)}
    assert sorted(events) == sorted(created)

    start_three_schedulers(procs, tmp_path, "0 8 * * *")
    assert await state() == (schedules, events)  # one schedule each, version unchanged, nothing audited

    start_three_schedulers(procs, tmp_path, "30 9 * * 1-5")
    schedules, events = await state()
    assert schedules == {"send_report": (2, "30 9 * * 1-5"), "hourly-report": (1, None)}
    assert sorted(events) == sorted([*created, ("schedule.updated", "send_report", "code")])


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_three_schedulers_on_one_sqlite_file(procs: Procs, tmp_path: Path) -> None:
    await declared_twice_then_changed(procs, tmp_path, procs.env["JOBENGINE_DATABASE"])


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_three_schedulers_on_postgresql(procs: Procs, tmp_path: Path, postgres_dsn: str) -> None:
    procs.env["JOBENGINE_DATABASE"] = postgres_dsn
    await declared_twice_then_changed(procs, tmp_path, postgres_dsn)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_worker_of_the_app_syncs_them_as_it_starts(procs: Procs, tmp_path: Path) -> None:
    (tmp_path / "periodic_app.py").write_text(APP.format(cron="0 8 * * *"))
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}
    worker = procs.spawn("worker", "worker", "--app", "periodic_app:engine", env=env)
    procs.wait_ready(worker)
    async with Engine.from_settings(Settings(database=procs.env["JOBENGINE_DATABASE"])) as engine:
        schedules = {s.name: (s.version, s.created_by) for s in await engine.schedules.list(ScheduleFilter())}
    assert schedules == {"send_report": (1, "code"), "hourly-report": (1, "code")}
    assert "schedule send_report created from code (version 1)" in procs.output(worker)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, procs.output(worker)
