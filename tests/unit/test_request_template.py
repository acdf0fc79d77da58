"""Run request templates (a schedule whose ticks start run requests): their JSON, the fields their errors
name, ``engine.periodic(request=...)`` and the run id a tick derives."""

from __future__ import annotations

import json
import uuid

import pytest

from jobengine import Engine
from jobengine.core.firing import tick_run_id
from jobengine.core.request_template import RequestTemplate
from jobengine.core.run_requests import PriorityClass, RunMode
from jobengine.core.schedules import JobTemplate, ScheduleSpec, template_from_json, template_task
from jobengine.engine.compose import open_store
from jobengine.errors import InvalidSchedule

BODY = {"task": "score", "mode": "incremental", "source": "accounts", "planner": "accounts", "version": "v2",
        "priority": "high", "environment": {"region": "eu"}, "segment_size": 10}  # fmt: skip


def test_json_round_trip_and_kind() -> None:
    template = template_from_json(BODY)
    assert isinstance(template, RequestTemplate)
    assert (template.mode, template.priority, template.stream) == (RunMode.INCREMENTAL, PriorityClass.HIGH,
                                                                   "score accounts")  # fmt: skip
    assert template_from_json(json.loads(json.dumps(template.to_json()))) == template
    assert isinstance(template_from_json({"task": "score"}), JobTemplate)  # no mode: a job template
    assert template_task(template) == "score"
    spec = ScheduleSpec.from_json({"name": "s", "every": 60, "template": BODY})
    assert spec.template == template
    request = template.request([3, 1, 3], run_id="r1")
    assert (request.items, request.run_id, request.environment) == ((1, 3), "r1", {"region": "eu"})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mode": "sometimes"}, "template.mode"),
        ({"priority": "urgent"}, "template.priority"),
        ({"segment_size": 0}, "template.segment_size"),
        ({"task": "no spaces"}, "template.task"),
        ({"source": ""}, "template.source"),
        ({"environment": {"x": 1}}, "template.environment"),
        ({"colour": "red"}, "template.colour"),
        ({"items": [1]}, "template.items"),  # with the planner: one of them
        ({"planner": None}, "template.items"),  # neither
        ({"items": "abc", "planner": None}, "template.items"),
    ],
)
def test_errors_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        RequestTemplate.from_json({**BODY, **change})
    assert caught.value.field == field


def test_overlap_queue_is_refused() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        ScheduleSpec(name="s", every=60, template=RequestTemplate.from_json(BODY), overlap="queue")  # type: ignore[arg-type]
    assert caught.value.field == "overlap"


def test_a_tick_run_id_is_the_same_wherever_it_is_computed() -> None:
    a = tick_run_id("sched-1", 1_700_000_100.0)
    assert a == tick_run_id("sched-1", 1_700_000_100.0)
    assert a != tick_run_id("sched-2", 1_700_000_100.0) and a != tick_run_id("sched-1", 1_700_000_200.0)
    parsed = uuid.UUID(a)
    assert parsed.version == 7 and parsed.int >> 80 == 1_700_000_100_000  # sorts by the tick like a new id


@pytest.fixture
def engine() -> Engine:
    return Engine(open_store("memory"))  # never started: declaring writes nothing


def test_periodic_declares_a_schedule_of_a_run_request(engine: Engine) -> None:
    template = RequestTemplate.from_json(BODY)
    spec = engine.periodic("0 * * * *", request=template)
    assert (spec.name, spec.template) == ("score", template)
    assert engine.periodic.declared == (spec,)
    with pytest.raises(InvalidSchedule) as caught:
        engine.periodic("0 * * * *", request=template, name="x", queue="q")  # type: ignore[call-overload]
    assert caught.value.field == "queue"
