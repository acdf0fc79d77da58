"""The scheduler's services on their own, with their dependencies handed in (no engine, no store I/O): a
store without the scheduling ports makes reads and changes raise ConfigError and leaves the job paths'
hooks silent; the frames of jobengine itself never count in a fingerprint."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest

import jobengine
from jobengine.core.clock import ManualClock
from jobengine.core.ids import JobId, LeaseToken
from jobengine.core.models import AttemptError, Changed, Event, FailOutcome, Failure, Job
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.errors import ConfigError
from jobengine.ports.store import Store
from jobengine.scheduler.planning import PlannerRegistry
from jobengine.scheduler.runs import Runs
from jobengine.scheduler.schedules import Schedules
from jobengine.scheduler.signatures import EXCLUDED_FRAMES, Signatures
from jobengine.tasks import TaskRegistry


class _Untouchable:
    """Stands for the job store: a service that has no scheduling store must not reach it."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the job store was used: {name}")


def _published(events: Sequence[Event]) -> None:
    raise AssertionError("nothing is published without a scheduling store")


async def _jobs_created(jobs: Sequence[Job]) -> None:
    raise AssertionError("no job is created without a scheduling store")


async def _pinned(spec: ScheduleSpec) -> ScheduleSpec:
    return spec


def _jobs() -> Store:
    store: Store = _Untouchable()  # type: ignore[assignment]
    return store


async def test_without_scheduling_ports_schedules_and_runs_raise_config_error() -> None:
    planners = PlannerRegistry()
    schedules = Schedules(
        None, clock=ManualClock(), tasks=TaskRegistry(), planners=planners, published=_published,
        jobs_created=_jobs_created, pack_template=_pinned,
    )  # fmt: skip
    runs = Runs(
        None, jobs=_jobs(), clock=ManualClock(), tasks=TaskRegistry(), published=_published,
        jobs_created=_jobs_created, run_retention=60.0,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="database: this store does not support schedules"):
        await schedules.create(ScheduleSpec(name="s", every=60, template=JobTemplate(task="t")))
    with pytest.raises(ConfigError, match="database"):
        await schedules.list()
    with pytest.raises(ConfigError, match="database"):
        await runs.get("r")
    assert await runs.prune() == 0


async def test_without_scheduling_ports_the_hooks_of_the_job_paths_do_nothing() -> None:
    runs = Runs(
        None, jobs=_jobs(), clock=ManualClock(), tasks=TaskRegistry(), published=_published,
        jobs_created=_jobs_created, run_retention=60.0,
    )  # fmt: skip
    signatures = Signatures(None, jobs=_jobs(), clock=ManualClock(), published=_published, cache_seconds=2.0)
    failure = Failure(
        JobId("j1"), LeaseToken("l1"), AttemptError(1, 0.0, "ValueError", "bad", None, None), FailOutcome.RETRY
    )
    failures, prints = await signatures.prepare([failure])
    assert (failures, prints) == ([failure], {})
    await signatures.record(prints, Changed())
    await runs.started([])
    await runs.ended([])
    await runs.reopened([])


def test_a_planner_registered_on_schedules_is_in_the_registry_it_was_given() -> None:
    planners = PlannerRegistry()
    schedules = Schedules(
        None, clock=ManualClock(), tasks=TaskRegistry(), planners=planners, published=_published,
        jobs_created=_jobs_created, pack_template=_pinned,
    )  # fmt: skip

    @schedules.planner("regions")
    def regions(ctx: object) -> list[str]:
        return ["eu", "us"]

    schedules.add_planner("files", lambda ctx: [])
    assert list(planners) == ["files", "regions"]
    assert planners.get("regions") is regions


def test_the_frames_left_out_of_fingerprints_are_the_whole_jobengine_package() -> None:
    package = os.path.dirname(os.path.abspath(jobengine.__file__)) + os.sep
    assert package in EXCLUDED_FRAMES
