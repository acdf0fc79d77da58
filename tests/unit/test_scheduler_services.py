"""The scheduler's services on their own, with their dependencies handed in (no engine, no store I/O): the
planners registered on ``Schedules`` are the registry it was given; the frames of jobengine itself never
count in a fingerprint."""

from __future__ import annotations

import os
from collections.abc import Sequence

import jobengine
from jobengine.core.clock import ManualClock
from jobengine.core.models import Event, Job
from jobengine.core.schedules import ScheduleSpec
from jobengine.ports.schedules import SchedulingStore
from jobengine.scheduler.planning import PlannerRegistry
from jobengine.scheduler.schedules import Schedules
from jobengine.scheduler.signatures import EXCLUDED_FRAMES
from jobengine.tasks import TaskRegistry


class _Untouchable:
    """Stands for the store: registering a planner must not reach it."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the store was used: {name}")


def _published(events: Sequence[Event]) -> None:
    raise AssertionError("registering a planner publishes nothing")


async def _jobs_created(jobs: Sequence[Job]) -> None:
    raise AssertionError("registering a planner creates no job")


async def _pinned(spec: ScheduleSpec) -> ScheduleSpec:
    return spec


def test_a_planner_registered_on_schedules_is_in_the_registry_it_was_given() -> None:
    planners = PlannerRegistry()
    store: SchedulingStore = _Untouchable()  # type: ignore[assignment]
    schedules = Schedules(
        store, ids=store, clock=ManualClock(), tasks=TaskRegistry(), planners=planners, published=_published,
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
