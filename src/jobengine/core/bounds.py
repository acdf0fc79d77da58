"""The values every backend and serializer can store and read back, checked where input enters.

Every edge (the HTTP API and its worker protocol, the CLI, ``Engine.enqueue`` and the schedule
templates) checks its input against these bounds before anything is written, so no stored row can hold a
value that a read cannot decode. Each check raises :class:`~jobengine.errors.InvalidJob` naming the field
(HTTP 422, a one-line CLI error). The bounds (times from 1970 to 9998 in UTC, int64, text without NUL or
lone surrogates, JSON nested at most ``MAX_DEPTH`` deep with integers of at most ``MAX_JSON_INT_DIGITS``
digits, names of 1-200 characters) are tabled with their reasons in docs/http.md ("Errors and input").

Reads are the other half: :func:`clamp_time` turns whatever a row holds (a time stored before these
bounds, or written by another program) into a time that renders, so a read never fails on a stored value.

Usage::

    at = bounds.check_time("run_at", datetime(2030, 1, 1, tzinfo=UTC))   # UNIX seconds
    bounds.check_json("payload", {"a": "\\ud800"})   # InvalidJob: payload: ... lone surrogate ... (at payload.a)
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Final

from jobengine.errors import InvalidJob

#: The earliest and latest time a field may hold, as UNIX seconds (both included).
MIN_TIME: Final = 0.0
# Half a millisecond short of 9999: a double this large is only close to .999, and this one renders as .999.
MAX_TIME: Final = datetime(9999, 1, 1, tzinfo=UTC).timestamp() - 0.0005
MIN_TIME_ISO: Final = "1970-01-01T00:00:00Z"
MAX_TIME_ISO: Final = "9998-12-31T23:59:59.999Z"

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

MAX_DEPTH: Final = 64
#: Items a schedule's template or a run request lists.
MAX_ITEMS: Final = 100_000
#: Python reads back integers of up to 4300 digits from text (``sys.set_int_max_str_digits``); a margin.
MAX_JSON_INT_DIGITS: Final = 4000
_MAX_JSON_INT_BITS: Final = int(MAX_JSON_INT_DIGITS * math.log2(10))

_TIME_RANGE: Final = f"must be a time from {MIN_TIME_ISO} to {MAX_TIME_ISO}"


def check_time(field: str, value: float | datetime) -> float:
    """``value`` (a datetime with a time zone, or UNIX seconds) as UNIX seconds within the time bounds."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidJob(field, "a datetime must carry a time zone")
        try:
            seconds = value.timestamp()
        except (OverflowError, ValueError):
            raise InvalidJob(field, _TIME_RANGE) from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidJob(field, f"expected UNIX seconds or a datetime, got {type(value).__name__}")
    if not MIN_TIME <= seconds <= MAX_TIME:  # NaN fails this too
        raise InvalidJob(field, _TIME_RANGE)
    return seconds


def time_error(value: datetime) -> str | None:
    """Why ``value`` is out of the time bounds, or None (for schema validators that name the field)."""
    try:
        check_time("time", value)
    except InvalidJob as exc:
        return exc.message
    return None


def clamp_time(seconds: float | None) -> float | None:
    """A stored time as one that renders: within the bounds (NaN gives None). For reads only."""
    if seconds is None or seconds != seconds:
        return None
    return MIN_TIME if seconds < MIN_TIME else MAX_TIME if seconds > MAX_TIME else seconds


def check_int(field: str, value: object, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """An integer (not a bool) from ``low`` to ``high``, by default a signed 64-bit integer."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidJob(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidJob(field, f"must be an integer from {low} to {high}")
    return value


def text_error(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or None."""
    if value.isascii():
        return "must not contain NUL (U+0000)" if "\x00" in value else None
    if "\x00" in value:
        return "must not contain NUL (U+0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"must be valid Unicode: a lone surrogate U+{ord(value[exc.start]):04X} at character {exc.start}"
    return None


def storable(value: str) -> str:
    """``value`` with NUL and lone surrogates replaced by U+FFFD: for text the engine records rather than
    accepts (an exception's message and traceback), which must be kept even when it holds them."""
    if text_error(value) is None:
        return value
    return "".join("\ufffd" if c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF else c for c in value)


def check_text(field: str, value: object, max_length: int | None = None) -> str:
    """A string every backend stores as text: no NUL, no lone surrogate; at most ``max_length`` characters."""
    if not isinstance(value, str):
        raise InvalidJob(field, f"must be a string, got {type(value).__name__}")
    error = text_error(value)
    if error is not None:
        raise InvalidJob(field, error)
    if max_length is not None and len(value) > max_length:
        raise InvalidJob(field, f"must be at most {max_length} characters")
    return value


def printable(value: str) -> str:
    """``value`` with what cannot be stored (NUL, lone surrogates) and other control characters escaped,
    to name a bad key in an error message that is itself stored, logged and sent."""
    if value.isprintable() and text_error(value) is None:
        return value
    return "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else f"\\u{ord(c):04x}" for c in value)


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


def check_json(field: str, value: Any, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` if it is JSON every backend stores and reads back (see the module docstring); else
    InvalidJob naming the field, its message the path to the bad part (``at payload.items.3``)."""
    if value is None or (type(value) is dict and _flat(value)):
        return value
    try:
        _walk(value, 1, max_depth)
    except _Refused as exc:
        where = f" (at {'.'.join([field, *reversed(exc.path)])})" if exc.path else ""
        raise InvalidJob(field, exc.message + where) from None
    return value


_SCALARS: Final = frozenset({bool, type(None)})


def _flat(value: dict[Any, Any]) -> bool:
    """A flat object of ASCII keys and plain values, the usual payload: checked in one cheap pass (this runs
    for every job enqueued). False means "walk it", not "refused"."""
    for key, item in value.items():
        if type(key) is not str or not key.isascii() or "\x00" in key:
            return False
        kind = type(item)
        if kind is str:
            if not item.isascii() or "\x00" in item:
                return False
        elif kind is int:
            if not -INT64_MAX <= item <= INT64_MAX:
                return False
        elif kind is float:
            if item - item != 0:  # NaN and the infinities
                return False
        elif kind not in _SCALARS:
            return False
    return True


def _walk(value: Any, depth: int, max_depth: int) -> None:
    if depth > max_depth:
        raise _Refused(f"nested deeper than {max_depth} levels")
    if isinstance(value, str):
        error = text_error(value)
        if error is not None:
            raise _Refused(error)
    elif value is None or isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if value.bit_length() > _MAX_JSON_INT_BITS:
            raise _Refused(f"integers must have at most {MAX_JSON_INT_DIGITS} digits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused("NaN and Infinity are not JSON")
    elif isinstance(value, dict | list | tuple):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            try:
                if isinstance(value, dict):
                    if not isinstance(key, str):
                        raise _Refused(f"keys must be strings, not {type(key).__name__}")
                    error = text_error(key)
                    if error is not None:
                        raise _Refused(f"a key {error}")
                _walk(item, depth + 1, max_depth)
            except _Refused as exc:
                exc.path.append(printable(str(key)))
                raise
    else:
        raise _Refused(f"must be JSON-serialisable (not {type(value).__name__})")
