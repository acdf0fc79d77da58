"""A user's app of three tasks (async, sync, three phases), unchanged from test_task_app.py, tested the way its
author would: an ordinary pytest file in their project, run by ``pytest`` in a subprocess, using
``jobengine.testing`` and its ``jobengine_testing`` fixture (loaded from jobengine's package metadata, with
no configuration). No worker process, no service, no ``JOBENGINE_*`` variable; the app's own database is
never created."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.test_task_app import APP

USER_TESTS = """
import pytest

from jobengine import JobFailed, JobState, testing
from jobengine.testing import TestEngine
from shop import Customer, engine, etl, load, resize, send_welcome, transform

ADA = Customer(email="ada@example.com", name="Ada")


def test_the_three_tasks_run_when_drained(jobengine_testing):
    t = jobengine_testing(engine)
    ada = send_welcome.enqueue_sync(ADA, lang="fr")
    small = resize.options(priority=5).enqueue_sync("/img/cat.png", width=64)
    day = etl.options(depends_on=[small]).enqueue_sync(source="s3://bucket/day", factor=3)
    assert engine.get_jobs  # the app's engine, in test mode
    jobs = t.drain_sync()
    assert jobs[0].task == "resize"  # the highest priority first
    assert sorted(j.task for j in jobs) == ["etl", "resize", "send_welcome"]
    assert all(j.state is JobState.SUCCEEDED for j in jobs)
    assert ada.result_sync() == "[fr] welcome Ada <ada@example.com> (attempt 1)"
    assert small.result_sync() == {"path": "/img/cat.png", "width": 64, "thread": True}
    assert day.result_sync() == {"extract": {"source": "s3://bucket/day", "rows": 15}, "transform": 45,
                                 "load": "loaded 45 rows"}


async def test_async_code_drains_with_await():
    async with TestEngine(engine) as t:
        handle = await send_welcome.enqueue(ADA)
        (job,) = await t.drain()
        assert job.id == handle.id and await handle.result() == "[en] welcome Ada <ada@example.com> (attempt 1)"


def test_each_test_starts_empty(jobengine_testing):
    t = jobengine_testing(engine)
    assert t.drain_sync() == []


def test_a_bad_argument_is_refused_before_anything_is_stored(jobengine_testing):
    t = jobengine_testing(engine)
    with pytest.raises(ValueError, match="customer"):
        send_welcome.enqueue_sync({"email": "no name"})
    assert t.drain_sync() == []


async def test_a_task_called_directly():
    ctx = testing.context()
    assert await send_welcome(ctx, ADA, lang="de") == "[de] welcome Ada <ada@example.com> (attempt 1)"
    assert ctx.progress_reports == [(0.5, "rendering")]


def test_a_sync_task_called_directly_saves_its_checkpoint():
    ctx = testing.context(attempt=2)
    assert resize(ctx, "/img/dog.png")["width"] == 100
    assert ctx.checkpoints == [{"path": "/img/dog.png"}]


async def test_phases_called_directly_with_earlier_results():
    ctx = testing.context(results={"extract": {"source": "s", "rows": 4}}, phase="transform")
    assert transform(ctx, factor=5) == 20
    ctx = testing.context(results={"extract": {"rows": 4}, "transform": 20}, phase="load")
    assert await load(ctx) == "loaded 20 rows"
    assert ctx.checkpoint == {"loading": 20}
"""

PYTEST_INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


@pytest.mark.slow
def test_a_users_pytest_file_tests_the_three_task_app_in_test_mode(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(APP)
    (tmp_path / "test_shop.py").write_text(USER_TESTS)
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBENGINE_", "PYTEST_"))}
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shop.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=240,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"\b7 passed\b", output), output
    assert "Task was destroyed" not in output, output
    assert not (tmp_path / ".jobengine").exists(), "test mode opened the app's own database"
