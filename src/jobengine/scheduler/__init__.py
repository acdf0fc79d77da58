"""The scheduler: schedules, runs and failure signatures as services (``engine.schedules``, ``engine.runs``,
``engine.signatures``), and the passes that fire schedules' ticks exactly once into runs and plan them into
jobs (``engine.scheduler``), driven by a leader-gated loop (``SchedulerLoop``). It sees the store through
its ports and never imports a backend or the engine."""

from jobengine.scheduler.loop import SchedulerLoop, SchedulerOptions, SchedulerSource
from jobengine.scheduler.passes import SchedulerPasses
from jobengine.scheduler.planning import PlanContext, PlannerFn, PlannerRegistry
from jobengine.scheduler.runs import Runs
from jobengine.scheduler.schedules import Schedules
from jobengine.scheduler.signatures import Signatures

__all__ = [
    "PlanContext",
    "PlannerFn",
    "PlannerRegistry",
    "Runs",
    "SchedulerLoop",
    "SchedulerOptions",
    "SchedulerPasses",
    "SchedulerSource",
    "Schedules",
    "Signatures",
]
