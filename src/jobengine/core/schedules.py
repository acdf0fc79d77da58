"""Schedules as values: what to run (a template), when (a cadence), and what to do when it is late or
busy. A template is jobs (:class:`JobTemplate`), a graph of jobs
(:class:`~jobengine.core.graph_template.GraphTemplate`) or a run request
(:class:`~jobengine.core.request_template.RequestTemplate`). Values validate in their constructor and raise
:class:`InvalidSchedule` naming the field, so a bad schedule is refused before it reaches any store. Usage::

    spec = ScheduleSpec(
        name="nightly-report",
        cron="30 2 * * *",
        timezone="Europe/Paris",
        template=JobTemplate(task="report.build", payload={"kind": "daily"}, items=("eu", "us"), segment_size=1),
        overlap=OverlapPolicy.SKIP,
        misfire=MisfirePolicy.CATCH_UP,
        catch_up=3,
    )
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Final

from jobengine.core import bounds
from jobengine.core.cron import Cadence, parse_cadence, parse_duration
from jobengine.core.graph_template import GraphTemplate, is_graph_json
from jobengine.core.ids import ScheduleId
from jobengine.core.models import MAX_PRIORITY, NAME_RE, Json, NewEvent
from jobengine.core.request_template import RequestTemplate, is_request_json
from jobengine.errors import InvalidJob, InvalidSchedule

MAX_ITEMS: Final = bounds.MAX_ITEMS
MAX_SEGMENTS: Final = 10_000
MAX_CATCH_UP: Final = 1000
MAX_JITTER: Final = 86400.0

# Audit events: kept in the event log with the job events, ``data.actor`` says who.
SCHEDULE_CREATED: Final = "schedule.created"
SCHEDULE_UPDATED: Final = "schedule.updated"
SCHEDULE_PAUSED: Final = "schedule.paused"
SCHEDULE_RESUMED: Final = "schedule.resumed"
SCHEDULE_DELETED: Final = "schedule.deleted"
#: Ticks that a misfire policy dropped (the scheduler was down); ``data.skipped`` counts them.
SCHEDULE_MISFIRED: Final = "schedule.misfired"
#: A tick dropped by the overlap policy ``skip`` (the previous run was still going).
SCHEDULE_SKIPPED: Final = "schedule.skipped"

#: The actor of changes that come from schedules declared in code (``@engine.periodic``).
DECLARED_BY: Final = "code"
#: What a declaration in code says about a schedule. ``enabled`` is not among them: pausing and resuming
#: are an operator's, so a declared schedule someone paused stays paused when the app starts again.
DECLARED_FIELDS: Final = ("cron", "every", "timezone", "template", "overlap", "misfire", "catch_up", "jitter")


class OverlapPolicy(StrEnum):
    """What a tick does while the schedule's previous run is still going (planning, queued or running)."""

    ALLOW = "allow"  # fire anyway: runs may overlap
    SKIP = "skip"  # drop the tick (recorded as skipped)
    QUEUE = "queue"  # fire a run that waits (``planning``) and is planned once the previous run ended


class MisfirePolicy(StrEnum):
    """What to do with ticks found more than the misfire grace late (the scheduler was down)."""

    SKIP = "skip"  # none of them fire
    RUN_ONCE = "run_once"  # one run, for the newest missed tick
    CATCH_UP = "catch_up"  # the newest ``catch_up`` missed ticks each fire, oldest first


def _check_name(field: str, value: object) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise InvalidSchedule(
            field,
            f"must be 1-200 characters of letters, digits and _.:-@/, starting with a letter or digit (got {value!r})",
        )
    return value


def _check_int(field: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidSchedule(field, f"must be an integer from {low} to {high}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """The jobs a run creates. Without ``items`` (and ``planner``) a run is one job with ``payload``.

    With ``items`` (or a registered ``planner`` that returns them at fire time) a run fans out into segments
    of ``segment_size`` items, one job each, whose payload is ``payload`` (an object) plus ``items`` (its
    share), ``segment`` (0-based) and ``segments`` (how many). No items: the run completes as ``no_work``.
    ``queue``, ``priority`` and ``max_attempts`` default to the task's registration, else default / 0 / 3.
    """

    task: str
    payload: Json = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    items: tuple[Json, ...] | None = None
    planner: str | None = None
    segment_size: int = 1

    def __post_init__(self) -> None:
        _check_name("template.task", self.task)
        if self.queue is not None:
            _check_name("template.queue", self.queue)
        if self.planner is not None:
            _check_name("template.planner", self.planner)
        if self.priority is not None:
            _check_int("template.priority", self.priority, -MAX_PRIORITY, MAX_PRIORITY)
        if self.max_attempts is not None:
            _check_int("template.max_attempts", self.max_attempts, 1, 1000)
        _check_int("template.segment_size", self.segment_size, 1, MAX_ITEMS)
        try:
            bounds.check_json("template.payload", self.payload)
        except InvalidJob as exc:
            raise InvalidSchedule(exc.field, exc.message) from None
        if self.items is not None:
            if isinstance(self.items, str | bytes | Mapping) or not hasattr(self.items, "__iter__"):
                raise InvalidSchedule("template.items", "must be a list of JSON values")
            object.__setattr__(self, "items", tuple(self.items))
            assert self.items is not None
            if len(self.items) > MAX_ITEMS:
                raise InvalidSchedule("template.items", f"at most {MAX_ITEMS} items")
            try:
                bounds.check_json("template.items", list(self.items))
            except InvalidJob as exc:
                raise InvalidSchedule(exc.field, exc.message) from None
            if self.planner is not None:
                raise InvalidSchedule("template.items", "give items or a planner, not both")
        if self.fans_out and self.payload is not None and not isinstance(self.payload, Mapping):
            raise InvalidSchedule("template.payload", "must be an object (or null) when the template lists items")

    @property
    def fans_out(self) -> bool:
        return self.items is not None or self.planner is not None

    def to_json(self) -> dict[str, Json]:
        return {
            "task": self.task,
            "payload": self.payload,
            "queue": self.queue,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "items": None if self.items is None else list(self.items),
            "planner": self.planner,
            "segment_size": self.segment_size,
        }

    @classmethod
    def from_json(cls, d: object) -> JobTemplate:
        """From a JSON object (an API body, a stored row). Raises InvalidSchedule naming the field."""
        if not isinstance(d, Mapping):
            raise InvalidSchedule("template", "must be an object with at least a task")
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise InvalidSchedule(f"template.{key}", f"unknown field (known: {', '.join(sorted(known))})")
        if "task" not in d:
            raise InvalidSchedule("template.task", "is required")
        values = {k: v for k, v in d.items() if v is not None or k == "payload"}
        return cls(**values)


#: What a run of a schedule creates: jobs (:class:`JobTemplate`), one graph of jobs
#: (:class:`~jobengine.core.graph_template.GraphTemplate`) or the run of a run request
#: (:class:`~jobengine.core.request_template.RequestTemplate`).
Template = JobTemplate | GraphTemplate | RequestTemplate


def template_from_json(d: object) -> Template:
    """A template from its JSON: a graph's when it has ``nodes``, a run request's when it has ``mode``, else a
    job template. Raises InvalidSchedule."""
    if is_graph_json(d):
        return GraphTemplate.from_json(d)
    return RequestTemplate.from_json(d) if is_request_json(d) else JobTemplate.from_json(d)


def template_task(template: Template) -> str | None:
    """The task a template runs; None for a graph (its nodes run several)."""
    return None if isinstance(template, GraphTemplate) else template.task


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """Everything a user says about a schedule. Exactly one of ``cron`` and ``every`` (seconds; use
    :func:`parse_duration` for ``"30s"``). ``catch_up`` is the N of :attr:`MisfirePolicy.CATCH_UP`.
    ``jitter``: each run's jobs start up to this many seconds after the tick (the same offset on every
    replica, derived from the schedule and the tick)."""

    name: str
    template: Template
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    misfire: MisfirePolicy = MisfirePolicy.SKIP
    catch_up: int = 0
    jitter: float = 0.0
    enabled: bool = True
    tenant: str = "default"

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        _check_name("tenant", self.tenant)
        if not isinstance(self.template, JobTemplate | GraphTemplate | RequestTemplate):
            raise InvalidSchedule(
                "template", "must be a JobTemplate, a GraphTemplate (a graph's as_template()) or a RequestTemplate"
            )
        if self.cron is not None:
            object.__setattr__(self, "cron", " ".join(str(self.cron).split()))
        if self.every is not None:
            object.__setattr__(self, "every", parse_duration(self.every, "every"))
        object.__setattr__(self, "overlap", _enum(OverlapPolicy, self.overlap, "overlap"))
        object.__setattr__(self, "misfire", _enum(MisfirePolicy, self.misfire, "misfire"))
        if isinstance(self.template, RequestTemplate) and self.overlap is OverlapPolicy.QUEUE:
            # A waiting run would take its items when its turn comes, after the cursor it was fired against.
            raise InvalidSchedule("overlap", "a run request's schedule takes allow or skip, not queue")
        self.cadence()  # validates cron / every / timezone together
        _check_int("catch_up", self.catch_up, 0, MAX_CATCH_UP)
        if self.misfire is MisfirePolicy.CATCH_UP and self.catch_up < 1:
            raise InvalidSchedule("catch_up", "misfire catch_up needs catch_up >= 1 (how many missed ticks to run)")
        jitter = parse_duration(self.jitter, "jitter")
        if jitter > MAX_JITTER:
            raise InvalidSchedule("jitter", "must be at most one day")
        object.__setattr__(self, "jitter", jitter)
        if not isinstance(self.enabled, bool):
            raise InvalidSchedule("enabled", "must be true or false")

    def cadence(self) -> Cadence:
        return parse_cadence(self.cron, self.every, self.timezone)

    def to_json(self) -> dict[str, Json]:
        return {
            "name": self.name,
            "tenant": self.tenant,
            "cron": self.cron,
            "every": self.every,
            "timezone": self.timezone,
            "template": self.template.to_json(),
            "overlap": self.overlap.value,
            "misfire": self.misfire.value,
            "catch_up": self.catch_up,
            "jitter": self.jitter,
            "enabled": self.enabled,
        }

    @classmethod
    def from_json(cls, d: object) -> ScheduleSpec:
        """From a JSON object; ``every`` and ``jitter`` may be strings like ``"30s"``. Raises InvalidSchedule."""
        if not isinstance(d, Mapping):
            raise InvalidSchedule("schedule", "must be an object")
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise InvalidSchedule(key, f"unknown field (known: {', '.join(sorted(known))})")
        for key in ("name", "template"):
            if key not in d:
                raise InvalidSchedule(key, "is required")
        values: dict[str, Any] = {k: v for k, v in d.items() if v is not None}
        values["template"] = template_from_json(d["template"])
        return cls(**values)


def _enum(kind: type[Any], value: object, field: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise InvalidSchedule(field, f"{value!r} is not one of {', '.join(m.value for m in kind)}") from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule. ``cursor``: the newest tick already handled (fired, skipped or dropped); a tick
    at or before it never fires again. ``next_fire_at``: the next tick, None while paused. ``version``
    grows with every change a user makes, and guards concurrent changes and firing."""

    id: ScheduleId
    spec: ScheduleSpec
    version: int
    cursor: float
    next_fire_at: float | None
    created_at: float
    updated_at: float
    created_by: str | None = None
    updated_by: str | None = None

    @property
    def tenant(self) -> str:
        return self.spec.tenant

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def enabled(self) -> bool:
        return self.spec.enabled


def runs_of(schedule: Schedule) -> ScheduleId:
    """The ``schedule_id`` a schedule's runs carry, to list them: its id, or for a run request template its
    stream (the runs of the stream started by hand too)."""
    template = schedule.spec.template
    return ScheduleId(template.stream) if isinstance(template, RequestTemplate) else schedule.id


def declared_changes(stored: ScheduleSpec, declared: ScheduleSpec) -> list[str]:
    """The :data:`DECLARED_FIELDS` whose values differ, compared as the JSON a store keeps (a tuple and a
    list of the same values are equal)."""
    a, b = (json.loads(json.dumps(spec.to_json())) for spec in (stored, declared))
    return [name for name in DECLARED_FIELDS if a[name] != b[name]]


def first_fire(spec: ScheduleSpec, after: float) -> float | None:
    """``next_fire_at`` of a schedule whose cursor is ``after``: None while disabled."""
    return spec.cadence().next_after(after) if spec.enabled else None


@dataclass(frozen=True, slots=True)
class ScheduleFilter:
    tenant: str | None = None
    name: str | None = None
    enabled: bool | None = None
    limit: int = 100


def audit_event(type_: str, tenant: str, actor: str, data: Mapping[str, Json]) -> NewEvent:
    """An audit record for the event log: who (``actor``) did ``type_`` to what (``data``)."""
    return NewEvent(type=type_, tenant=tenant, job_id=None, queue=None, task=None, data={"actor": actor, **data})


def schedule_event(type_: str, schedule: Schedule, actor: str, **extra: Json) -> NewEvent:
    body: dict[str, Json] = {"schedule_id": schedule.id, "name": schedule.name, **extra}
    event = audit_event(type_, schedule.tenant, actor, body)
    template = schedule.spec.template
    queue = None if isinstance(template, GraphTemplate) else template.queue
    return NewEvent(event.type, event.tenant, None, queue, template_task(template), event.data)


def check_actor(actor: object) -> str:
    if not isinstance(actor, str) or not 1 <= len(actor) <= 200:
        raise InvalidSchedule("actor", "must be a string of 1-200 characters (who makes the change)")
    return actor
