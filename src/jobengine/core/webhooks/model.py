"""Endpoints, deliveries, attempts and inbound hooks, with the validation of what a user may give (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from jobengine.core import events, graphs, runs, schedules, signatures
from jobengine.core.mapping import TriggerMapping
from jobengine.core.models import Event
from jobengine.errors import InvalidJob, JobEngineError

#: Delivery states: waiting for an attempt / delivered (2xx) / given up (window over, 410, endpoint gone).
PENDING: Final = "pending"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
DELIVERY_STATES: Final = (PENDING, SUCCEEDED, FAILED)

#: The event the engine appends when it disables an endpoint (410, or failing for the whole retry window).
ENDPOINT_DISABLED: Final = "webhook.endpoint_disabled"

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
_PATTERN_RE: Final = re.compile(r"^[A-Za-z0-9_.:\-@]{1,200}(\.\*)?$|^\*$")

#: Every type the event log holds; a filter names one of them, a family (``job.*``) or ``*``, so a typo is
#: refused instead of silently matching nothing.
EVENT_TYPES: Final = (
    *events.ALL,
    runs.RUN_CREATED, runs.RUN_PLANNED, runs.RUN_STARTED, runs.RUN_COMPLETED, runs.RUN_ERROR,
    runs.RUN_CANCELLED, runs.RUN_REOPENED,
    schedules.SCHEDULE_CREATED, schedules.SCHEDULE_UPDATED, schedules.SCHEDULE_PAUSED,
    schedules.SCHEDULE_RESUMED, schedules.SCHEDULE_DELETED, schedules.SCHEDULE_MISFIRED,
    schedules.SCHEDULE_SKIPPED,
    signatures.SIGNATURE_UPDATED,
    *graphs.GRAPH_EVENTS,
)  # fmt: skip
EVENT_FAMILIES: Final = tuple(dict.fromkeys(t.split(".")[0] + ".*" for t in EVENT_TYPES))


class InvalidWebhook(InvalidJob):
    """A webhook endpoint or inbound hook is refused; ``field`` names the field, ``message`` says why."""


#: What every inbound event without a valid signature is told, whatever the reason (no such hook, no
#: signature, a wrong one): a sender without the secret learns nothing, not even whether the hook exists.
NOT_SIGNED: Final = "the event is not signed by a known inbound hook"


class InboundRefused(JobEngineError):
    """An inbound event is refused before anything is written (HTTP 401). ``field`` names the header at
    fault once the signature is valid (``webhook-timestamp``); None for :data:`NOT_SIGNED`."""

    def __init__(self, message: str = NOT_SIGNED, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InboundReplay(JobEngineError):
    """A validly signed inbound event whose id was received already within ``inbound_replay_window``
    (HTTP 409): nothing is triggered again."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id} was received already; it is not triggered again")
        self.event_id = event_id


class InboundLimited(JobEngineError):
    """Over the hook's rate limit (HTTP 429): nothing was recorded; try again after ``wait`` seconds."""

    def __init__(self, hook: str, wait: float) -> None:
        super().__init__(f"over the rate limit of hook {hook!r}; retry later")
        self.wait = wait


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events an endpoint wants. Empty tuples match everything; ``types`` entries may end in ``.*``
    (``job.*``) or be ``*``."""

    types: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()

    def matches(self, event: Event) -> bool:
        if self.types and not any(_type_matches(p, event.type) for p in self.types):
            return False
        if self.queues and event.queue not in self.queues:
            return False
        return not (self.tasks and event.task not in self.tasks)

    def to_json(self) -> dict[str, list[str]]:
        return {"types": list(self.types), "queues": list(self.queues), "tasks": list(self.tasks)}


def _type_matches(pattern: str, event_type: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return event_type.startswith(pattern[:-1])
    return pattern == event_type


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A tenant's webhook receiver. ``secret`` signs every delivery; after a rotation ``previous_secret``
    signs too until ``previous_until``. ``rate_limit`` deliveries per ``rate_window`` seconds (None: the
    settings' default). ``failing_since``: the first failed attempt since the last success."""

    id: str
    tenant: str
    url: str
    secret: str
    filter: EventFilter = field(default_factory=EventFilter)
    description: str = ""
    enabled: bool = True
    disabled_reason: str | None = None
    rate_limit: int | None = None
    rate_window: float | None = None
    previous_secret: str | None = None
    previous_until: float | None = None
    failing_since: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0

    def secrets_at(self, now: float) -> tuple[str, ...]:
        if self.previous_secret and self.previous_until is not None and now < self.previous_until:
            return (self.secret, self.previous_secret)
        return (self.secret,)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event owed to one endpoint: ``body`` is the payload as it was when the event happened (a
    snapshot: it survives the job's deletion). ``series_attempts`` / ``window_start`` count the attempts of
    the current series (a manual resend starts a new one); ``attempts`` counts them all."""

    id: str
    tenant: str
    endpoint_id: str
    event_id: int
    event_type: str
    body: str
    state: str = PENDING
    attempts: int = 0
    series_attempts: int = 0
    next_at: float = 0.0
    window_start: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0
    last_status: int | None = None
    last_error: str | None = None
    lease_token: str | None = None
    lease_until: float | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    delivery_id: str
    attempt: int
    tenant: str
    at: float
    status: int | None
    latency_ms: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class InboundHook:
    """``POST /api/v1/hooks/{tenant}/{name}`` signed with ``secret`` (Standard Webhooks headers, or
    ``X-Scheduler-Signature`` / ``X-Signature: sha256=<hex>``) triggers a run of ``schedule`` (the tenant's
    schedule id) with the event's JSON; ``template`` maps parts of it into the jobs' payload or items.
    Names are unique per tenant."""

    name: str
    tenant: str
    schedule: str
    secret: str
    enabled: bool = True
    created_at: float = 0.0
    template: TriggerMapping = field(default_factory=TriggerMapping)


def check_name(value: object, field_name: str = "name") -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise InvalidWebhook(field_name, "1-100 letters, digits, '_', '.', '-', starting with a letter or digit")
    return value


def check_filter(value: Mapping[str, Any] | None) -> EventFilter:
    """``{"types": [...], "queues": [...], "tasks": [...]}`` (each optional)."""
    if value is None:
        return EventFilter()
    parts: dict[str, tuple[str, ...]] = {}
    for key in ("types", "queues", "tasks"):
        items = value.get(key) or ()
        if isinstance(items, str) or not isinstance(items, Sequence):
            raise InvalidWebhook(f"filter.{key}", "must be a list of strings")
        if len(items) > 100:
            raise InvalidWebhook(f"filter.{key}", "at most 100 entries")
        for item in items:
            if not isinstance(item, str) or not _PATTERN_RE.match(item):
                raise InvalidWebhook(f"filter.{key}", f"{item!r} is not a valid name (or, for types, 'job.*')")
        if key == "types":
            for item in items:
                if item != "*" and item not in EVENT_TYPES and item not in EVENT_FAMILIES:
                    raise InvalidWebhook(
                        "filter.types",
                        f"{item!r} is not an event type (known: *, {', '.join(EVENT_FAMILIES)}, "
                        f"{', '.join(EVENT_TYPES)})",
                    )
        parts[key] = tuple(dict.fromkeys(items))
    unknown = set(value) - {"types", "queues", "tasks"}
    if unknown:
        raise InvalidWebhook(f"filter.{sorted(unknown)[0]}", "unknown filter (known: types, queues, tasks)")
    return EventFilter(parts["types"], parts["queues"], parts["tasks"])


def check_rate(limit: object, window: object) -> tuple[int | None, float | None]:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000):
        raise InvalidWebhook("rate_limit", "must be an integer from 1 to 100000 (deliveries per window)")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int | float) or not 0.1 <= window <= 86400
    ):
        raise InvalidWebhook("rate_window", "must be from 0.1 to 86400 seconds")
    return limit, (float(window) if window is not None else None)


def check_url_syntax(url: object) -> str:
    """The URL's form only (``ssrf.check_url`` decides whether its addresses may be reached)."""
    if not isinstance(url, str) or not 1 <= len(url) <= 2000:
        raise InvalidWebhook("url", "must be an http(s) URL of at most 2000 characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidWebhook("url", f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidWebhook("url", "the scheme must be http or https")
    if not parts.hostname:
        raise InvalidWebhook("url", "the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidWebhook("url", "credentials in the URL are not allowed (use the signature)")
    if port == 0:
        raise InvalidWebhook("url", "port 0 is not a valid port")
    if any(ch.isspace() for ch in url):
        raise InvalidWebhook("url", "must not contain whitespace")
    return url
