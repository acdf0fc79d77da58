"""What a worker does to its process.

- It loads only what running jobs needs: the scheduler's, webhooks' and the feed's modules are imported when
  first used. Their import measured ~100 ms of a worker's ~0.4 s start (``python -X importtime``), which
  counts in every "launch -> drained" figure and in every CLI command.
- It tunes the garbage collector once (``WorkerOptions.tune_gc``, see ``worker.runtime.tune_gc``), unless
  told not to or the application set its own thresholds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
import asyncio, gc, json, sys
from jobengine import Engine, Settings

async def main(database, tune, threshold):
    if threshold:
        gc.set_threshold(*threshold)
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
        worker = engine.worker(concurrency=2, poll_interval=0.05, tune_gc=tune)
        await asyncio.wait_for(worker.run(), 30)
    loaded = sorted(m for m in sys.modules if m.startswith("jobengine"))
    out = {"ran": sorted(ran), "loaded": loaded, "frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])))
"""


def _worker_process(
    tmp_path: Path, *, tune: bool = True, threshold: tuple[int, int, int] | None = None
) -> dict[str, Any]:
    """Run three jobs in a new interpreter; what it ran, which jobengine modules it loaded, its gc state."""
    database = str(tmp_path / "jobs.db")
    args = [database, json.dumps(tune), json.dumps(threshold)]
    done = subprocess.run([sys.executable, "-c", _SCRIPT, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ran"] == [1, 2, 3]
    return out


def test_a_worker_running_jobs_never_imports_the_schedulers_webhooks_or_feed_modules(tmp_path: Path) -> None:
    out = _worker_process(tmp_path)
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


def test_a_worker_freezes_what_start_up_made_and_collects_less_often(tmp_path: Path) -> None:
    out = _worker_process(tmp_path)
    assert out["frozen"] > 1000  # modules, classes, the engine
    assert out["threshold"] == [7000, 10, 10]


def testtune_gc_false_and_an_applications_own_threshold_are_left_alone(tmp_path: Path) -> None:
    off = _worker_process(tmp_path, tune=False)
    assert off["frozen"] == 0
    assert off["threshold"] == [700, 10, 10]
    own = _worker_process(tmp_path, threshold=(1000, 20, 20))
    assert own["threshold"] == [1000, 20, 20]
    assert own["frozen"] > 1000
