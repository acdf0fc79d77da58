"""Schedules declared in code (``engine.periodic``): what a declaration stores, the errors of one that cannot
work (raised where it is written, at import), what counts as a change, and the decorator's typing."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from jobengine import Engine, InvalidJob, Task
from jobengine.core.schedules import (
    JobTemplate,
    MisfirePolicy,
    OverlapPolicy,
    ScheduleSpec,
    declared_changes,
)
from jobengine.engine.compose import open_store
from jobengine.errors import InvalidSchedule


@pytest.fixture
def engine() -> Engine:
    return Engine(open_store("memory"))  # never started: declaring writes nothing


def test_the_decorator_declares_a_schedule_of_the_task_and_returns_its_handle(engine: Engine) -> None:
    @engine.periodic("*/5  * * * *", tz="Europe/Paris", queue="reports", overlap="skip")
    @engine.task
    async def send_report(kind: str = "short") -> str:
        return kind

    assert isinstance(send_report, Task) and send_report.name == "send_report"
    (spec,) = engine.periodic.declared
    assert (spec.name, spec.cron, spec.timezone, spec.overlap) == (
        "send_report", "*/5 * * * *", "Europe/Paris", OverlapPolicy.SKIP,
    )  # fmt: skip
    assert spec.template == JobTemplate(task="send_report", payload={}, queue="reports")


def test_a_plain_function_becomes_a_task_and_the_call_form_takes_a_handle_or_a_name(engine: Engine) -> None:
    @engine.periodic(every="30s", name="often", kwargs={"n": 2})
    def double(n: int) -> int:
        return 2 * n

    assert isinstance(double, Task) and engine.tasks.get("double") is not None
    assert double(4) == 8  # still the function, for a unit test
    hourly = engine.periodic("0 * * * *", task=double, args=(3,), misfire="catch_up", catch_up=2)
    by_name = engine.periodic("@daily", task="mail.digest", payload={"to": "team"}, priority=5, tenant="acme")
    assert [s.name for s in engine.periodic.declared] == ["often", "double", "mail.digest"]
    often = engine.periodic.declared[0]
    assert (often.every, often.cron, often.template.payload) == (30.0, None, {"n": 2})
    assert (hourly.template.payload, hourly.misfire, hourly.catch_up) == ({"n": 3}, MisfirePolicy.CATCH_UP, 2)
    assert (by_name.template.task, by_name.template.priority, by_name.tenant) == ("mail.digest", 5, "acme")


def test_a_declaration_that_cannot_work_is_refused_where_it_is_written(engine: Engine) -> None:
    @engine.task
    async def report(day: str) -> None: ...

    with pytest.raises(InvalidSchedule) as bad_cron:
        engine.periodic("61 * * * *", task=report, args=("mon",))
    assert bad_cron.value.field == "cron"
    with pytest.raises(InvalidSchedule) as bad_tz:
        engine.periodic("0 * * * *", task=report, args=("mon",), tz="Mars/Olympus")
    assert bad_tz.value.field == "timezone"
    with pytest.raises(TypeError, match="missing a required argument: 'day'"):
        engine.periodic("0 * * * *", task=report)  # no arguments for a task that needs one
    with pytest.raises(TypeError, match="unexpected keyword argument 'dya'"):
        engine.periodic("0 * * * *", task=report, kwargs={"dya": "mon"})
    with pytest.raises(InvalidJob) as not_json:
        engine.periodic("0 * * * *", task=report, args=(object(),))
    assert not_json.value.field == "day"
    with pytest.raises(InvalidSchedule) as both:
        engine.periodic("0 * * * *", task=report, args=("mon",), payload={"day": "mon"})
    assert both.value.field == "payload"
    with pytest.raises(InvalidJob) as wrong_payload:
        engine.periodic("0 * * * *", task=report, payload={"dya": "mon"})
    assert wrong_payload.value.field == "payload.day"
    engine.periodic("0 * * * *", task=report, payload={"day": "mon"}, name="by-payload")
    with pytest.raises(InvalidSchedule) as by_name:
        engine.periodic("0 * * * *", task="report", args=("mon",))
    assert by_name.value.field == "args"
    with pytest.raises(InvalidSchedule) as neither:
        engine.periodic(task="report")
    assert neither.value.field in ("cron", "every")
    assert [s.template.payload for s in engine.periodic.declared] == [{"day": "mon"}]


def test_a_name_is_declared_once(engine: Engine) -> None:
    @engine.task
    async def ping() -> None: ...

    engine.periodic("0 * * * *", task=ping)
    engine.periodic("0 * * * *", task=ping)  # the same declaration again (a module imported twice): one
    with pytest.raises(InvalidSchedule, match="declared twice; give each its own name=") as twice:
        engine.periodic("30 * * * *", task=ping)
    assert twice.value.field == "name"
    engine.periodic("30 * * * *", task=ping, name="ping-half-past")
    engine.periodic("30 * * * *", task=ping, tenant="acme")  # another tenant, another schedule
    assert [(s.tenant, s.name) for s in engine.periodic.declared] == [
        ("default", "ping"), ("default", "ping-half-past"), ("acme", "ping"),
    ]  # fmt: skip


def test_what_counts_as_a_change_of_a_declaration() -> None:
    spec = ScheduleSpec(name="r", cron="0 * * * *", template=JobTemplate(task="t", payload={"days": [1, 2]}))
    assert declared_changes(spec, replace(spec, template=JobTemplate(task="t", payload={"days": (1, 2)}))) == []
    assert declared_changes(spec, replace(spec, enabled=False)) == []  # pausing is the operator's
    assert declared_changes(spec, replace(spec, cron="*/5 * * * *", timezone="Europe/Paris")) == ["cron", "timezone"]
    assert declared_changes(spec, replace(spec, cron=None, every=60.0)) == ["cron", "every"]
    assert declared_changes(spec, replace(spec, template=JobTemplate(task="t", payload={"days": [1]}))) == ["template"]


USER_FILE = """
from __future__ import annotations

from jobengine import Engine, Settings

engine = Engine.from_settings(Settings(database="memory"))


@engine.periodic("*/5 * * * *", tz="Europe/Paris")
@engine.task(queue="reports")
async def send_report(kind: str = "short") -> str:
    return kind


@engine.periodic("0 * * * *")
def cleanup(days: int = 7) -> int:
    return days


async def producer() -> None:
    text: str = await (await send_report.enqueue("full")).result()
    kept: int = cleanup.enqueue_sync(days=3).result_sync()
    print(text, kept, engine.periodic("@daily", task=send_report, kwargs={"kind": "daily"}).name)

    await send_report.enqueue(knd="x")  # error
    wrong: int = await (await send_report.enqueue()).result()  # error
    engine.periodic("@daily", task=send_report, tzz="UTC")  # error
    print(wrong)
"""


def test_mypy_strict_keeps_the_handle_typed_through_the_decorator(tmp_path: Path) -> None:
    source = tmp_path / "user_app.py"
    source.write_text(USER_FILE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
         str(source)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    reported = {int(m[1]) for m in re.finditer(r"^.*user_app\.py:(\d+): error:", done.stdout, re.MULTILINE)}
    expected = {i for i, line in enumerate(USER_FILE.splitlines(), 1) if line.endswith("# error")}
    assert len(expected) == 3
    assert reported == expected, done.stdout + done.stderr
