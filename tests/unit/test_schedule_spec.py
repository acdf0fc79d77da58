"""Schedules and job templates validate in their constructor and name the field that is wrong."""

from __future__ import annotations

import pytest

from jobengine.core.schedules import JobTemplate, MisfirePolicy, OverlapPolicy, ScheduleSpec
from jobengine.errors import InvalidJob, InvalidSchedule

T = JobTemplate(task="report")


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"name": "bad name!"}, "name", "letters, digits"),
        ({"cron": "* * *"}, "cron", "expected 5"),
        ({"cron": None, "every": None}, "cron", "give cron (a CRON expression) or every (an interval)"),
        ({"every": "fast"}, "every", "not a duration"),
        ({"timezone": "Nowhere/City"}, "timezone", "unknown IANA time zone"),
        ({"overlap": "sometimes"}, "overlap", "is not one of allow, skip, queue"),
        ({"misfire": "later"}, "misfire", "is not one of skip, run_once, catch_up"),
        ({"misfire": "catch_up"}, "catch_up", "needs catch_up >= 1"),
        ({"catch_up": 5000}, "catch_up", "from 0 to 1000"),
        ({"jitter": "2d"}, "jitter", "at most one day"),
        ({"enabled": "yes"}, "enabled", "true or false"),
    ],
)
def test_a_bad_schedule_names_the_field(fields: dict[str, object], field: str, message: str) -> None:
    values: dict[str, object] = {"name": "nightly", "cron": "0 2 * * *", "template": T, **fields}
    with pytest.raises(InvalidSchedule) as err:
        ScheduleSpec(**values)  # type: ignore[arg-type]
    assert err.value.field == field
    assert message in err.value.message
    assert isinstance(err.value, InvalidJob)  # every handler of bad input catches it


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"task": ""}, "template.task"),
        ({"queue": "a b"}, "template.queue"),
        ({"priority": 10**7}, "template.priority"),
        ({"max_attempts": 0}, "template.max_attempts"),
        ({"segment_size": 0}, "template.segment_size"),
        ({"items": "abc"}, "template.items"),
        ({"items": [1], "planner": "p"}, "template.items"),
        ({"items": [1], "payload": [1, 2]}, "template.payload"),
        ({"payload": {1: object()}}, "template.payload"),
    ],
)
def test_a_bad_template_names_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        JobTemplate(**{"task": "report", **fields})  # type: ignore[arg-type]
    assert err.value.field == field


def test_json_round_trip_and_strings_for_durations() -> None:
    spec = ScheduleSpec.from_json(
        {"name": "n", "every": "1h30m", "jitter": "10s", "overlap": "skip", "misfire": "catch_up", "catch_up": 3,
         "template": {"task": "t", "items": [1, 2], "segment_size": 2}, "tenant": "acme"}
    )  # fmt: skip
    assert (spec.every, spec.jitter, spec.overlap, spec.misfire) == (5400.0, 10.0, OverlapPolicy.SKIP,
                                                                     MisfirePolicy.CATCH_UP)  # fmt: skip
    assert spec.template.items == (1, 2)
    assert ScheduleSpec.from_json(spec.to_json()) == spec
    with pytest.raises(InvalidSchedule) as err:
        ScheduleSpec.from_json({"name": "n", "cron": "* * * * *", "template": {"task": "t"}, "colour": "red"})
    assert err.value.field == "colour"
    with pytest.raises(InvalidSchedule) as err:
        ScheduleSpec.from_json({"name": "n", "cron": "* * * * *", "template": {"tsk": "t"}})
    assert err.value.field == "template.tsk"
    with pytest.raises(InvalidSchedule) as err:
        ScheduleSpec.from_json({"name": "n", "cron": "* * * * *"})
    assert err.value.field == "template"
