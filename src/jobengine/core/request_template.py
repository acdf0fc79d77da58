"""A run request as a schedule's template: each tick starts one run of it (:mod:`jobengine.core.run_requests`).

The template says everything a :class:`~jobengine.core.run_requests.RunRequest` says but its run id and
items: the run id of a tick's run is derived from the schedule and the tick (so a tick fired twice is one
run), and the items are the template's list or what its ``planner`` returns at fire time. An
``incremental`` tick therefore takes the items after its stream's cursor and moves the cursor once its
segments succeeded, like any incremental run request. Its JSON is a run request's (``POST /api/v1/runs``)
without ``run_id`` and ``reason``, plus ``planner``; ``mode`` is required there, as it tells it apart from
a job template. It validates in its constructor and raises :class:`~jobengine.errors.InvalidSchedule`
naming the field (``template.mode``). Usage::

    template = RequestTemplate(task="score", mode=RunMode.INCREMENTAL, source="accounts", planner="accounts")
    spec = ScheduleSpec(name="score-new-accounts", every=3600, template=template, overlap=OverlapPolicy.SKIP)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from jobengine.core import bounds
from jobengine.core.models import Json, check_name
from jobengine.core.run_requests import PriorityClass, RunMode, RunRequest, stream_task
from jobengine.errors import InvalidJob, InvalidSchedule


@dataclass(frozen=True, slots=True)
class RequestTemplate:
    """What each tick's run request says: ``task`` (at ``version``), ``mode``, ``priority`` class, input
    ``source`` (whose cursor an incremental tick reads and moves), ``environment``, ``segment_size`` and
    ``queue``, over ``items`` or the items a registered ``planner`` returns at fire time (one of them)."""

    task: str
    mode: RunMode = RunMode.FULL
    version: str | None = None
    priority: PriorityClass = PriorityClass.NORMAL
    source: str = "default"
    items: tuple[Json, ...] | None = None
    planner: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    segment_size: int = 100
    queue: str | None = None

    def __post_init__(self) -> None:
        if self.planner is not None:
            try:
                check_name("template.planner", self.planner)
            except InvalidJob as exc:
                raise InvalidSchedule(exc.field, exc.message) from None
        if self.items is not None:
            if isinstance(self.items, str | bytes | Mapping) or not isinstance(self.items, Sequence):
                raise InvalidSchedule("template.items", "must be a list of JSON values")
            object.__setattr__(self, "items", tuple(self.items))
            if self.planner is not None:
                raise InvalidSchedule("template.items", "give items or a planner, not both")
        elif self.planner is None:
            raise InvalidSchedule("template.items", "give items or a planner (a run request runs over items)")
        checked = self.request(self.items or ())  # every other field is checked as a run request's
        for name in ("mode", "priority", "environment"):
            object.__setattr__(self, name, getattr(checked, name))

    @property
    def stream(self) -> str:
        """Task and source: the stream whose cursor the runs read and move (``RunRequest.stream``)."""
        return f"{stream_task(self.task)} {self.source}"

    def request(self, items: Sequence[Json], run_id: str | None = None, reason: str | None = None) -> RunRequest:
        """The run request of one tick over ``items``. Raises InvalidSchedule naming ``template.<field>``."""
        try:
            return RunRequest(
                task=self.task, items=tuple(items), version=self.version, mode=self.mode, priority=self.priority,
                source=self.source, environment=self.environment, run_id=run_id, segment_size=self.segment_size,
                queue=self.queue, reason=reason,
            )  # fmt: skip
        except InvalidJob as exc:
            raise InvalidSchedule(f"template.{exc.field}", exc.message) from None

    def to_json(self) -> dict[str, Json]:
        return {
            "task": self.task, "mode": self.mode.value, "version": self.version, "priority": self.priority.value,
            "source": self.source, "items": None if self.items is None else list(self.items),
            "planner": self.planner, "environment": dict(self.environment), "segment_size": self.segment_size,
            "queue": self.queue,
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: object) -> RequestTemplate:
        """From a JSON object (an API body, a stored row). Raises InvalidSchedule naming the field."""
        if not isinstance(d, Mapping):
            raise InvalidSchedule("template", "must be an object with at least a task and a mode")
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise InvalidSchedule(f"template.{key}", f"unknown field (known: {', '.join(sorted(known))})")
        for key in ("task", "mode"):
            if key not in d:
                raise InvalidSchedule(f"template.{key}", "is required")
        values: dict[str, Any] = {k: v for k, v in d.items() if v is not None}
        try:
            bounds.check_json("template.items", values.get("items"))
        except InvalidJob as exc:
            raise InvalidSchedule(exc.field, exc.message) from None
        return cls(**values)


def is_request_json(d: object) -> bool:
    """Whether a template's JSON is a run request's (it has ``mode``) rather than a job template's."""
    return isinstance(d, Mapping) and "mode" in d and "nodes" not in d
