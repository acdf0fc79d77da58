"""Cadences: CRON in a time zone (with the daylight-saving rule) and fixed intervals; what is refused and why."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from jobengine.core.cron import CronCadence, IntervalCadence, parse_cadence, parse_duration
from jobengine.errors import InvalidSchedule

PARIS = ZoneInfo("Europe/Paris")


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def local(ts: float) -> str:
    return datetime.fromtimestamp(ts, PARIS).strftime("%H:%M%z")


def ticks(expr: str, start: str, end: str, tz: str = "Europe/Paris") -> list[float]:
    cadence = parse_cadence(expr, None, tz)
    out, t = [], at(start)
    while (t := cadence.next_after(t)) is not None and t <= at(end):  # type: ignore[assignment]
        out.append(t)
    return out


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("61 * * * *", "bad minute field '61' (allowed: 0-59"),
        ("* 24 * * *", "bad hour field '24'"),
        ("* * * 13 *", "bad month field '13'"),
        ("* * * * 9", "bad day-of-week field '9'"),
        ("*/0 * * * *", "bad minute field '*/0'"),
        ("* * *", "has 3 field(s); expected 5"),
        ("0 0 * * * *", "has 6 field(s); expected 5"),
        ("0 0 30 2 *", "never fires: no month of '2' has that day"),
        ("@reboot", "unknown alias '@reboot'"),
        ("", "must be a CRON expression"),
    ],
)
def test_a_bad_cron_expression_says_what_is_wrong(expr: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        parse_cadence(expr, None, "UTC")
    assert err.value.field == "cron"
    assert message in err.value.message


@pytest.mark.parametrize("zone", ["Europe/Pariss", "Mars/Base", "../etc/passwd", "", "EST5EDT/x"])
def test_an_unknown_time_zone_is_refused(zone: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        parse_cadence("* * * * *", None, zone)
    assert err.value.field == "timezone"
    assert "IANA time zone" in err.value.message


def test_give_cron_or_every_not_both_nor_neither() -> None:
    with pytest.raises(InvalidSchedule, match="not both"):
        parse_cadence("* * * * *", 60.0, "UTC")
    with pytest.raises(InvalidSchedule, match=r"give cron \(a CRON expression\) or every \(an interval\)$"):
        parse_cadence(None, None, "UTC")


@pytest.mark.parametrize(
    ("alias", "expected"),
    [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
     ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *")],
)  # fmt: skip
def test_aliases(alias: str, expected: str) -> None:
    cadence = parse_cadence(alias, None, "UTC")
    assert isinstance(cadence, CronCadence) and cadence.expr == expected


def test_cron_in_utc() -> None:
    got = ticks("*/15 9-10 * * MON-FRI", "2024-03-01T08:00:00+00:00", "2024-03-04T09:20:00+00:00", "UTC")
    expected = [at(f"2024-03-01T{h}:{m}:00+00:00") for h in ("09", "10") for m in ("00", "15", "30", "45")]
    assert got == [*expected, at("2024-03-04T09:00:00+00:00"), at("2024-03-04T09:15:00+00:00")]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(30, 30.0), ("30", 30.0), ("30s", 30.0), ("1.5m", 90.0), ("1h30m", 5400.0), ("500ms", 0.5), ("2d", 172800.0)],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value, "every") == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["30x", "s", "-5", "1h 2", True, None, "nan"])
def test_bad_durations(value: object) -> None:
    with pytest.raises(InvalidSchedule) as err:
        parse_duration(value, "every")  # type: ignore[arg-type]
    assert err.value.field == "every"


@pytest.mark.parametrize("every", [0.5, 0.0, 400 * 86400.0, 1.0005])
def test_an_interval_out_of_bounds_is_refused(every: float) -> None:
    with pytest.raises(InvalidSchedule) as err:
        parse_cadence(None, every, "UTC")
    assert err.value.field == "every"


def test_intervals_are_multiples_since_the_epoch() -> None:
    c = IntervalCadence(30.0)
    assert c.next_after(1_700_000_000.0) == 1_700_000_010.0
    assert c.next_after(1_700_000_010.0) == 1_700_000_040.0
    assert c.latest(1_700_000_100.0, 1_700_000_010.0, 10) == [1_700_000_100.0, 1_700_000_070.0, 1_700_000_040.0]
    assert c.latest(1_700_000_100.0, 1_700_000_010.0, 2) == [1_700_000_100.0, 1_700_000_070.0]
    assert IntervalCadence(1.5).next_after(1.0) == 1.5


# -- the daylight-saving rule, Europe/Paris: 2024-03-31 02:00 -> 03:00, 2024-10-27 03:00 -> 02:00 -----------
SPRING = ("2024-03-31T00:00:00+01:00", "2024-03-31T05:00:00+02:00")
AUTUMN = ("2024-10-27T00:00:00+02:00", "2024-10-27T05:00:00+01:00")


def test_spring_forward_a_skipped_local_time_fires_once_at_the_end_of_the_gap() -> None:
    assert [local(t) for t in ticks("30 2 * * *", *SPRING)] == ["03:00+0200"]
    # 02:00 and 02:30 do not exist: they merge into one tick at 03:00, which fires once.
    assert [local(t) for t in ticks("*/30 * * * *", *SPRING)] == [
        "00:30+0100", "01:00+0100", "01:30+0100", "03:00+0200", "03:30+0200", "04:00+0200", "04:30+0200",
        "05:00+0200",
    ]  # fmt: skip
    assert [local(t) for t in ticks("0 * * * *", *SPRING)] == ["01:00+0100", "03:00+0200", "04:00+0200", "05:00+0200"]


def test_fall_back_a_repeated_local_time_fires_exactly_once() -> None:
    assert [local(t) for t in ticks("30 2 * * *", *AUTUMN)] == ["02:30+0200"]
    assert [local(t) for t in ticks("0 * * * *", *AUTUMN)] == [
        "01:00+0200", "02:00+0200", "03:00+0100", "04:00+0100", "05:00+0100"
    ]  # fmt: skip
    half = ticks("*/30 * * * *", *AUTUMN)
    assert [local(t) for t in half] == [
        "00:30+0200", "01:00+0200", "01:30+0200", "02:00+0200", "02:30+0200", "03:00+0100", "03:30+0100",
        "04:00+0100", "04:30+0100", "05:00+0100",
    ]  # fmt: skip


def test_latest_walks_back_with_the_same_rule() -> None:
    for expr, (start, end) in (("*/30 * * * *", SPRING), ("*/30 * * * *", AUTUMN), ("30 2 * * *", SPRING)):
        forward = ticks(expr, start, end)
        backward = parse_cadence(expr, None, "Europe/Paris").latest(at(end), at(start), 100)
        assert list(reversed(backward)) == forward
    c = parse_cadence("*/30 * * * *", None, "Europe/Paris")
    assert [local(t) for t in c.latest(at(AUTUMN[1]), at(AUTUMN[0]), 3)] == ["05:00+0100", "04:30+0100", "04:00+0100"]


def test_next_after_from_inside_the_repeated_hour() -> None:
    # 02:10 of the second pass (+01:00): 02:30 already fired in the first pass, so the next tick is 03:00.
    c = parse_cadence("30 2,3 * * *", None, "Europe/Paris")
    assert local(c.next_after(at("2024-10-27T02:10:00+01:00")) or 0) == "03:30+0100"
