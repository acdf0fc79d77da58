"""The scheduler: fires schedules' ticks exactly once into runs, plans them into jobs, and runs as a
leader-gated loop (``SchedulerLoop``). It sees the engine through ``SchedulerSource`` and never a backend."""

from jobengine.scheduler.loop import SchedulerLoop, SchedulerOptions, SchedulerSource
from jobengine.scheduler.planning import PlanContext, PlannerFn, PlannerRegistry

__all__ = ["PlanContext", "PlannerFn", "PlannerRegistry", "SchedulerLoop", "SchedulerOptions", "SchedulerSource"]
