"""A worker process loads only what running jobs needs: the scheduler's, webhooks' and API's modules are
imported when first used. Their import measured ~100 ms of a worker's ~0.4 s start (``python -X importtime``),
which counts in every "launch -> drained" figure and in every CLI command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Modules a worker that runs plain jobs never needs.
NOT_FOR_WORKERS = (
    "jobengine.core.runs",
    "jobengine.core.schedules",
    "jobengine.core.signatures",
    "jobengine.core.cron",
    "jobengine.scheduler",
    "jobengine.ports.schedules",
    "jobengine.backends.sqlite.scheduling",
    "jobengine.backends.postgres.scheduling",
    "jobengine.webhooks.ssrf",
    "jobengine.feed",
)

_SCRIPT = """
import asyncio, json, sys
from jobengine import Engine, Settings

async def main(database):
    engine = Engine.from_settings(Settings(database=database))
    ran = []

    @engine.task()
    async def work(ctx):
        ran.append(ctx.payload["n"])
        if len(ran) == 3:
            worker.stop()

    async with engine:
        await engine.enqueue("work", {"n": 1})
        await engine.enqueue_many([engine.new_job("work", {"n": 2}), engine.new_job("work", {"n": 3})])
        worker = engine.worker(concurrency=2, poll_interval=0.05)
        await asyncio.wait_for(worker.run(), 30)
    loaded = sorted(m for m in sys.modules if m.startswith("jobengine"))
    print(json.dumps({"ran": sorted(ran), "loaded": loaded}))

asyncio.run(main(sys.argv[1]))
"""


def _worker_modules(tmp_path: Path) -> dict[str, list[object]]:
    database = str(tmp_path / "jobs.db")
    done = subprocess.run([sys.executable, "-c", _SCRIPT, database], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out: dict[str, list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_a_worker_running_jobs_never_imports_the_schedulers_webhooks_or_feed_modules(tmp_path: Path) -> None:
    out = _worker_modules(tmp_path)
    assert out["ran"] == [1, 2, 3]
    loaded = set(out["loaded"])
    assert "jobengine.worker.runtime" in loaded  # the check sees what a worker loads
    assert [m for m in NOT_FOR_WORKERS if m in loaded] == []


def test_the_lazy_names_of_the_package_resolve() -> None:
    import jobengine

    for name in ("Run", "Schedule", "ScheduleSpec", "Signature", "PlanContext", "RunTrigger"):
        assert getattr(jobengine, name).__name__ == name
    assert set(jobengine.__all__) <= set(dir(jobengine))
    try:
        jobengine.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
