"""Templates (Jinja2, autoescaped) and the small formatting filters they use. One environment per app."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.responses import HTMLResponse

from jobengine.core.bounds import clamp_time
from jobengine.core.clock import to_datetime
from jobengine.core.ids import short_id
from jobengine.core.models import Json

#: Scripts only from this site, none inline (htmx adds one <style> of its own, hence inline styles).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


def when(ts: float | None) -> str:
    """A UNIX time as ``2024-05-01 12:00:03Z`` (UTC), or an em dash."""
    moment = to_datetime(ts)  # clamped: a stored time out of the bounds still renders
    if moment is None:
        return "—"
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def ago(ts: float | None, now: float | None = None) -> str:
    """``12 s ago`` / ``in 3 min``."""
    ts = clamp_time(ts)
    if ts is None:
        return "—"
    delta = (now if now is not None else time.time()) - ts
    text = duration(abs(delta))
    return f"{text} ago" if delta >= 0 else f"in {text}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def percent(progress: float | None) -> str:
    return f"{max(0.0, min(1.0, progress or 0.0)) * 100:.0f}%"


#: Event fields that hold a fraction done (0..1), shown as a percentage.
FRACTION_KEYS = frozenset({"progress", "job_progress"})
#: Event fields that hold seconds elapsed or allowed, shown as a duration.
SECONDS_KEYS = frozenset({"duration", "timeout", "delay", "elapsed", "lease_seconds", "waited"})
#: A number in a time field is a UNIX time only from here on (smaller ones are offsets or counts).
_UNIX_TIMES_FROM = 1e9


def _is_time_key(key: str) -> bool:
    return key in ("at", "tick", "deadline") or key.endswith("_at")


def field_text(key: str, value: Json) -> str:
    """One event field as a person reads it: fractions as percentages, UNIX times as timestamps, seconds
    as durations, text without quotes, other floats rounded; lists and objects as compact JSON."""
    if isinstance(value, bool) or value is None:
        return "—" if value is None else ("yes" if value else "no")
    if isinstance(value, int | float):
        if key in FRACTION_KEYS and 0.0 <= value <= 1.0:
            return percent(value)
        if _is_time_key(key) and value >= _UNIX_TIMES_FROM:
            return when(value)
        if key in SECONDS_KEYS or key.endswith("_seconds"):
            return duration(float(value))
        return str(value) if isinstance(value, int) else f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "), default=str)


class EventField(NamedTuple):
    key: str
    text: str
    #: The ISO 8601 form of a UNIX time (the page shows it in the reader's time zone), else "".
    iso: str


def _field(key: str, value: Json) -> EventField:
    iso = ""
    if _is_time_key(key) and isinstance(value, int | float) and not isinstance(value, bool):
        moment = to_datetime(value) if value >= _UNIX_TIMES_FROM else None
        iso = moment.isoformat() if moment is not None else ""
    return EventField(key, field_text(key, value), iso)


def event_fields(data: Json) -> list[EventField]:
    """An event's data as fields in key order (see :func:`field_text`); data that is not an object is one
    field named ``value``."""
    if not isinstance(data, dict):
        return [] if data is None else [_field("value", data)]
    return [_field(str(k), v) for k, v in sorted(data.items())]


def pretty(value: Json) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def sparkline(values: Sequence[int], width: int = 120, height: int = 24) -> Markup:
    """An inline SVG polyline of ``values`` (no script needed), labelled for screen readers."""
    if not values:
        return Markup("")
    top = max(values) or 1
    step = width / max(1, len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values))
    label = f"occurrences over time: {', '.join(str(v) for v in values)}"
    return Markup(
        '<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{label}">'
        '<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{p}"/></svg>'
    ).format(w=width, h=height, label=label, p=points)


def make_environment() -> Environment:
    env = Environment(
        loader=PackageLoader("jobengine.dashboard", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=when, ago=ago, duration=duration, percent=percent, pretty=pretty, sparkline=sparkline,
                       event_fields=event_fields, short_id=short_id)  # fmt: skip
    return env


class Renderer:
    def __init__(self) -> None:
        self.env = make_environment()

    def text(self, template: str, values: Mapping[str, Any]) -> str:
        return self.env.get_template(template).render(**values)

    def page(self, template: str, values: Mapping[str, Any], status: int = 200) -> HTMLResponse:
        headers = {
            "Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
            "X-Content-Type-Options": "nosniff", "Content-Security-Policy": CSP,
        }  # fmt: skip
        return HTMLResponse(self.text(template, values), status, headers=headers)
