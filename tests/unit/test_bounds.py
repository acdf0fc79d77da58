"""core.bounds: what every backend and serializer can store and read back, and how a stored value out of
the bounds still reads (clamp_time, clock.iso, the dashboard and CLI renderers)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobengine.cli.output import clock_time
from jobengine.core import bounds
from jobengine.core.clock import iso, to_datetime
from jobengine.core.models import NewJob
from jobengine.core.schedules import JobTemplate
from jobengine.dashboard.render import ago, when
from jobengine.errors import InvalidJob, InvalidSchedule

WEST = timezone(-timedelta(hours=23, minutes=59))
EAST = timezone(timedelta(hours=23, minutes=59))


def test_the_time_bounds_render_with_any_offset_both_ways() -> None:
    for seconds in (bounds.MIN_TIME, bounds.MAX_TIME):
        moment = datetime.fromtimestamp(seconds, UTC)
        for zone in (WEST, EAST):
            assert moment.astimezone(zone).isoformat()  # no OverflowError in either direction
    assert iso(bounds.MIN_TIME) == "1970-01-01T00:00:00.000+00:00"
    assert iso(bounds.MAX_TIME) == "9998-12-31T23:59:59.999+00:00"


@pytest.mark.parametrize(
    "value",
    [
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=WEST),  # the input seen: year 10000 in UTC
        datetime(1, 1, 1, tzinfo=EAST),  # year 0 in UTC
        datetime(9999, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        -1.0,
        1e300,
        math.nan,
        math.inf,
    ],
)
def test_a_time_out_of_the_bounds_is_refused_naming_the_field(value: float | datetime) -> None:
    with pytest.raises(InvalidJob) as err:
        bounds.check_time("run_at", value)
    assert err.value.field == "run_at" and "1970-01-01T00:00:00Z" in err.value.message


def test_a_time_within_the_bounds_is_unix_seconds() -> None:
    assert bounds.check_time("t", datetime(2030, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == 1893456000.0
    assert bounds.check_time("t", datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)) < bounds.MAX_TIME
    assert bounds.check_time("t", 0) == 0.0
    with pytest.raises(InvalidJob, match="time zone"):
        bounds.check_time("t", datetime(2030, 1, 1))
    with pytest.raises(InvalidJob, match="got bool"):
        bounds.check_time("t", True)


def test_a_stored_time_out_of_the_bounds_still_reads() -> None:
    for stored in (-62135683140.0, 253402387139.0, 1e300, -math.inf, math.inf):
        assert iso(stored) is not None and to_datetime(stored) is not None
        assert when(stored).endswith("Z") and clock_time(stored, date=True) and ago(stored)
    assert iso(253402387139.0) == "9998-12-31T23:59:59.999+00:00"
    assert iso(-1.0) == "1970-01-01T00:00:00.000+00:00"
    assert iso(math.nan) is None and when(math.nan) == "—" and ago(math.nan) == "—"


def test_integers_are_int64_unless_a_field_says_otherwise() -> None:
    assert bounds.check_int("n", 2**63 - 1) == 2**63 - 1
    for bad in (2**63, -(2**63) - 1, True, 1.0, "1"):
        with pytest.raises(InvalidJob) as err:
            bounds.check_int("n", bad)
        assert err.value.field == "n"
    with pytest.raises(InvalidJob, match="from 1 to 3"):
        bounds.check_int("n", 4, 1, 3)


@pytest.mark.parametrize(
    ("text", "why"),
    [("\ud800", "lone surrogate U+D800"), ("ok\udfff", "U+DFFF at character 2"), ("a\x00b", "NUL")],
)
def test_text_without_a_utf8_form_or_with_nul_is_refused(text: str, why: str) -> None:
    with pytest.raises(InvalidJob) as err:
        bounds.check_text("reason", text)
    assert err.value.field == "reason" and why in err.value.message
    assert bounds.check_text("reason", "\U0001f600 é") == "\U0001f600 é"  # a pair is one character: fine
    with pytest.raises(InvalidJob, match="at most 3"):
        bounds.check_text("reason", "abcd", 3)


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ("\ud800", None),
        ({"a": ["x", "\ud800"]}, "payload.a.1"),
        ({"\ud800": 1}, "payload.\\ud800"),
        ({"k": {"a\x00": 1}}, "payload.k.a\\u0000"),
        ([math.nan], "payload.0"),
        ({"n": 10**4001}, "payload.n"),
        ({1: "x"}, None),
        ({"s": {1, 2}}, "payload.s"),
    ],
)
def test_json_that_a_backend_cannot_store_is_refused_with_its_path(payload: object, where: str | None) -> None:
    with pytest.raises(InvalidJob) as err:
        bounds.check_json("payload", payload)
    assert err.value.field == "payload"
    if where is not None:
        assert err.value.message.endswith(f"(at {where})")
    str(err.value).encode("utf-8")  # the message itself is storable and sendable


def test_json_nesting_is_bounded() -> None:
    deep: object = 1
    for _ in range(bounds.MAX_DEPTH - 1):
        deep = [deep]
    assert bounds.check_json("payload", deep) is deep
    with pytest.raises(InvalidJob, match="nested deeper than 64"):
        bounds.check_json("payload", [deep])


def test_a_flat_payload_takes_the_quick_pass_and_a_bad_one_the_walk() -> None:
    assert bounds.check_json("payload", {"a": 1, "b": "x", "c": None, "d": 1.5, "e": True})
    with pytest.raises(InvalidJob):
        bounds.check_json("payload", {"a": "\x00"})
    with pytest.raises(InvalidJob):
        bounds.check_json("payload", {"a": math.inf})
    assert bounds.check_json("payload", {"a": 2**100})  # a big integer is fine as JSON, walked


def test_new_jobs_and_templates_are_checked_before_any_store_sees_them() -> None:
    with pytest.raises(InvalidJob) as err:
        NewJob("t", {"a": "\ud800"})
    assert err.value.field == "payload"
    with pytest.raises(InvalidJob) as err:
        NewJob("t", run_at=253402387139.0)
    assert err.value.field == "run_at"
    with pytest.raises(InvalidJob) as err:
        NewJob("t", idempotency_key="k\udc80")
    assert err.value.field == "idempotency_key"
    with pytest.raises(InvalidSchedule) as err:
        JobTemplate("t", {"a": "\ud800"})
    assert err.value.field == "template.payload"
    with pytest.raises(InvalidSchedule) as err:
        JobTemplate("t", items=("\x00",))
    assert err.value.field == "template.items"
