"""When a schedule fires: CRON expressions in an IANA time zone, and fixed intervals. Pure: no I/O.

A *cadence* turns time into fire times ("ticks"), all float UNIX seconds::

    cadence = parse_cadence(cron="30 2 * * *", every=None, timezone="Europe/Paris")
    cadence.next_after(now)                  # the first tick strictly after ``now``
    cadence.latest(upto=now, after=cursor, limit=5)   # the newest ticks in (cursor, now], newest first

CRON (5 fields, or ``@yearly @annually @monthly @weekly @daily @midnight @hourly``) is evaluated on the
local wall clock of the time zone, by cronsim. **The daylight-saving rule** (one rule for every expression):

- a local time that happens twice (the clocks go back) fires **exactly once**, at its first occurrence;
- a local time that does not exist (the clocks go forward) fires **at most once**: at the first instant after
  the gap, merged with any other tick that lands on the same instant.

So ``30 2 * * *`` in Europe/Paris fires at 03:00 on the spring-forward day and once at 02:30 (CEST) on the
fall-back day; ``*/15 * * * *`` fires once at 03:00 in spring (02:00-02:45 do not exist) and skips the
repeated 02:00-02:45 in autumn. An interval (``every: 30s``) counts real seconds since the UNIX epoch
(ticks at multiples of the interval, so every replica computes the same ones) and ignores the time zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from jobengine.errors import InvalidSchedule

ALIASES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS: Final = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES: Final = ("0-59", "0-23", "1-31", "1-12 or JAN-DEC", "0-7 or SUN-SAT")
MIN_INTERVAL: Final = 1.0
MAX_INTERVAL: Final = 366 * 86400.0
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
# The widest daylight-saving shift in the tz database is 2 hours; a little more covers any wall-clock gap.
_DST_MARGIN: Final = timedelta(hours=3)


class Cadence(Protocol):
    def next_after(self, t: float) -> float | None:
        """The first tick strictly after ``t``; None if there is none (a CRON date that never comes)."""
        ...

    def latest(self, upto: float, after: float, limit: int) -> list[float]:
        """Up to ``limit`` ticks in ``(after, upto]``, the newest first."""
        ...


def parse_duration(value: str | float | int, field: str) -> float:
    """Seconds from ``30``, ``30s``, ``1.5m``, ``1h30m``, ``500ms``, ``2d``. Raises InvalidSchedule naming ``field``."""
    if isinstance(value, bool):
        raise InvalidSchedule(field, f"expected a duration like 30s, 5m or 1h, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_RE.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise InvalidSchedule(
                    field, f"{value!r} is not a duration (use a number of seconds, or units ms s m h d: 30s, 1h30m)"
                ) from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise InvalidSchedule(field, f"expected a duration like 30s, 5m or 1h, got {value!r}")
    if seconds != seconds or seconds < 0:  # NaN or negative
        raise InvalidSchedule(field, f"must be a duration >= 0, got {value!r}")
    return seconds


def load_zone(name: str) -> tzinfo:
    """The IANA time zone ``name`` (``UTC``, ``Europe/Paris``). Raises InvalidSchedule on ``timezone``."""
    if not isinstance(name, str) or not name or len(name) > 100 or name.startswith(("/", ".")) or ".." in name:
        raise InvalidSchedule("timezone", f"{name!r} is not an IANA time zone name (like UTC or Europe/Paris)")
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(
            "timezone", f"unknown IANA time zone {name!r} (like UTC, Europe/Paris, America/New_York)"
        ) from None


def normalize_cron(expr: str) -> str:
    """The 5-field form of ``expr`` (aliases expanded). Raises InvalidSchedule saying what is wrong."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidSchedule("cron", "must be a CRON expression like '*/5 * * * *' or an alias like @hourly")
    text = " ".join(expr.split())
    if text.startswith("@"):
        alias = ALIASES.get(text.lower())
        if alias is None:
            known = " ".join(ALIASES)
            raise InvalidSchedule("cron", f"unknown alias {text!r} (known: {known})")
        return alias
    fields = text.split(" ")
    if len(fields) != 5:
        raise InvalidSchedule(
            "cron",
            f"{text!r} has {len(fields)} field(s); expected 5: minute hour day-of-month month day-of-week "
            "(or an alias like @hourly)",
        )
    try:
        sim = CronSim(text, datetime(2000, 1, 1))
    except CronSimError as exc:
        if str(exc).endswith("day-of-month") and _valid(f"0 0 {fields[2]} * *"):
            raise InvalidSchedule("cron", f"{text!r} never fires: no month of {fields[3]!r} has that day") from None
        raise InvalidSchedule("cron", _explain(text, str(exc))) from None
    try:
        next(sim)
    except StopIteration:
        raise InvalidSchedule("cron", f"{text!r} never fires (no such date)") from None
    return text


def _valid(expr: str) -> bool:
    try:
        CronSim(expr, datetime(2000, 1, 1))
    except CronSimError:
        return False
    return True


def _explain(text: str, error: str) -> str:
    # cronsim names the field ("Bad minute"); say which value and what is allowed.
    for i, name in enumerate(_FIELDS):
        if error.lower().endswith(name):
            return f"{text!r}: bad {name} field {text.split(' ')[i]!r} (allowed: {_RANGES[i]}, with , - / and *)"
    return f"{text!r}: {error}"


@dataclass(frozen=True, slots=True)
class IntervalCadence:
    """Ticks at every multiple of ``seconds`` since the UNIX epoch (whole milliseconds)."""

    seconds: float

    @property
    def _ms(self) -> int:
        return round(self.seconds * 1000)

    def next_after(self, t: float) -> float:
        step = self._ms
        k = int(t * 1000) // step + 1
        while k * step <= t * 1000:  # float rounding of t * 1000
            k += 1
        return k * step / 1000

    def latest(self, upto: float, after: float, limit: int) -> list[float]:
        step = self._ms
        k = int(upto * 1000) // step
        while k * step > upto * 1000:
            k -= 1
        out: list[float] = []
        while len(out) < limit and k * step > after * 1000:
            out.append(k * step / 1000)
            k -= 1
        return out


@dataclass(frozen=True, slots=True)
class CronCadence:
    """A 5-field CRON expression on the wall clock of ``zone`` (see the module docstring for DST)."""

    expr: str
    zone: tzinfo

    def _instant(self, wall: datetime) -> float:
        """The fire instant of a wall-clock match: its first occurrence, or the end of the gap it is in."""
        if self.zone is UTC:
            return wall.replace(tzinfo=UTC).timestamp()
        aware = wall.replace(tzinfo=self.zone, fold=0)
        if aware.astimezone(UTC).astimezone(self.zone).replace(tzinfo=None) == wall:
            return aware.timestamp()
        # In a gap: the first wall-clock minute that exists (the gap's end; gaps are whole minutes).
        probe = wall.replace(second=0) + timedelta(minutes=1)
        while True:
            aware = probe.replace(tzinfo=self.zone, fold=0)
            if aware.astimezone(UTC).astimezone(self.zone).replace(tzinfo=None) == probe:
                return aware.timestamp()
            probe += timedelta(minutes=1)

    def _wall(self, t: float) -> datetime:
        return datetime.fromtimestamp(t, self.zone).replace(tzinfo=None)

    def next_after(self, t: float) -> float | None:
        # Wall-clock matches map to instants monotonically (non-decreasing), and the wall time of t maps to
        # at most t: so the first match after it whose instant is > t is the next tick.
        sim = CronSim(self.expr, self._wall(t))
        for wall in sim:
            instant = self._instant(wall)
            if instant > t:
                return instant
        return None

    def latest(self, upto: float, after: float, limit: int) -> list[float]:
        # Backwards from a little after upto's wall time: a repeated hour can put a match whose wall time is
        # later than upto's at an instant before upto.
        start = self._wall(upto) + _DST_MARGIN
        out: list[float] = []
        try:
            for wall in CronSim(self.expr, start, reverse=True):
                instant = self._instant(wall)
                if instant <= after:
                    break
                if instant > upto or (out and instant >= out[-1]):
                    continue  # after upto, or merged into a tick already counted (a gap)
                out.append(instant)
                if len(out) >= limit:
                    break
        except StopIteration:
            pass
        return out


def parse_cadence(cron: str | None, every: float | None, timezone: str) -> Cadence:
    """The cadence of a schedule: exactly one of ``cron`` and ``every`` (seconds). Raises InvalidSchedule."""
    zone = load_zone(timezone)
    if cron is None and every is None:
        raise InvalidSchedule("cron", "give cron (a CRON expression) or every (an interval)")
    if cron is not None and every is not None:
        raise InvalidSchedule("cron", "give cron (a CRON expression) or every (an interval), not both")
    if cron is not None:
        return CronCadence(normalize_cron(cron), zone)
    assert every is not None
    if not MIN_INTERVAL <= every <= MAX_INTERVAL:
        raise InvalidSchedule("every", f"must be from {MIN_INTERVAL:g}s to 366 days, got {every:g}s")
    if abs(every * 1000 - round(every * 1000)) > 1e-6:
        raise InvalidSchedule("every", "must be a whole number of milliseconds")
    return IntervalCadence(every)
