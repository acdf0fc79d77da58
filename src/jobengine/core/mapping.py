"""How the JSON that comes with a trigger (an inbound hook's event) reaches the jobs of its run (pure).

A :class:`TriggerMapping` names, for payload keys, the JSON Pointer (RFC 6901) of the value each takes from
the data (``""`` is the whole document), and for ``items`` the pointer of an array that becomes the run's
items. Applied to a schedule's :class:`~jobengine.core.schedules.JobTemplate` at trigger time: mapped keys
are set over the template's payload (an object or null), mapped items replace the template's items, so the
run fans out over them as the template's ``segment_size`` says (each job gets the payload plus its share
of the items). Usage::

    mapping = TriggerMapping.from_json({"payload": {"ref": "/ref", "event": ""}, "items": "/commits"})
    template = mapping.apply(schedule.spec.template, {"ref": "main", "commits": ["a1", "b2"]})

Failure policy: a malformed mapping raises InvalidSchedule naming ``template.payload.<key>`` or
``template.items``; data that lacks a mapped value, or whose items are not an array, raises InvalidSchedule
naming ``body<pointer>`` (``body/commits``), the place in the event at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from jobengine.core.graph_template import GraphTemplate
from jobengine.core.models import Json
from jobengine.core.schedules import JobTemplate, Template
from jobengine.errors import InvalidSchedule

MAX_KEYS: Final = 100
MAX_POINTER: Final = 500


def _check_pointer(field: str, value: object) -> str:
    if not isinstance(value, str) or len(value) > MAX_POINTER or (value and not value.startswith("/")):
        raise InvalidSchedule(field, f"must be a JSON Pointer: '' (the whole event) or '/a/b', at most "
                                     f"{MAX_POINTER} characters (got {value!r})")  # fmt: skip
    return value


def resolve(document: Json, pointer: str) -> Json:
    """The value ``pointer`` names in ``document``. Raises LookupError when there is none."""
    value = document
    if pointer == "":
        return value
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, Mapping):
            if token not in value:
                raise LookupError(pointer)
            value = value[token]
        elif isinstance(value, list):
            if not token.isdigit() or (token != "0" and token.startswith("0")) or int(token) >= len(value):
                raise LookupError(pointer)
            value = value[int(token)]
        else:
            raise LookupError(pointer)
    return value


@dataclass(frozen=True, slots=True)
class TriggerMapping:
    payload: tuple[tuple[str, str], ...] = ()  # (payload key, pointer), in the order given
    items: str | None = None

    def __post_init__(self) -> None:
        if len(self.payload) > MAX_KEYS:
            raise InvalidSchedule("template.payload", f"at most {MAX_KEYS} mapped keys")
        for key, pointer in self.payload:
            if not isinstance(key, str) or not 1 <= len(key) <= 200:
                raise InvalidSchedule("template.payload", f"a payload key must be 1-200 characters (got {key!r})")
            _check_pointer(f"template.payload.{key}", pointer)
        if self.items is not None:
            _check_pointer("template.items", self.items)

    @property
    def empty(self) -> bool:
        return not self.payload and self.items is None

    def to_json(self) -> dict[str, Json]:
        return {"payload": dict(self.payload), "items": self.items}

    @classmethod
    def from_json(cls, value: object) -> TriggerMapping:
        """From ``{"payload": {key: pointer}, "items": pointer}`` (both optional; None: no mapping)."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise InvalidSchedule("template", "must be an object: {payload: {key: pointer}, items: pointer}")
        unknown = set(value) - {"payload", "items"}
        if unknown:
            raise InvalidSchedule(f"template.{sorted(unknown)[0]}", "unknown field (known: payload, items)")
        payload = value.get("payload") or {}
        if not isinstance(payload, Mapping):
            raise InvalidSchedule("template.payload", "must be an object of payload key: JSON Pointer")
        return cls(tuple(payload.items()), value.get("items"))

    def check(self, template: Template) -> None:
        """Refuse a mapping the schedule's template cannot take (raises InvalidSchedule)."""
        if self.empty:
            return
        if not isinstance(template, JobTemplate):
            fires = "a graph" if isinstance(template, GraphTemplate) else "a run request"
            raise InvalidSchedule("template", f"the schedule fires {fires}: an event cannot be mapped into it")
        if self.payload and template.payload is not None and not isinstance(template.payload, Mapping):
            raise InvalidSchedule("template.payload", "the schedule's job payload is not an object: it cannot "
                                                      "take mapped keys")  # fmt: skip
        if self.items is not None and template.planner is not None:
            raise InvalidSchedule("template.items", f"the schedule's planner {template.planner!r} makes its "
                                                    "items: map the event into the payload instead")  # fmt: skip

    def apply(self, template: Template, data: Json) -> Template:
        """``template`` with the mapped values of ``data``; the template itself when nothing is mapped."""
        if self.empty:
            return template
        self.check(template)
        assert isinstance(template, JobTemplate)
        changes: dict[str, object] = {}
        if self.payload:
            payload = dict(template.payload or {})
            for key, pointer in self.payload:
                payload[key] = _value(data, pointer)
            changes["payload"] = payload
        if self.items is not None:
            items = _value(data, self.items)
            if not isinstance(items, list):
                raise InvalidSchedule(f"body{self.items}", "must be an array (it becomes the run's items)")
            changes["items"] = tuple(items)
        return replace(template, **changes)  # type: ignore[arg-type]


def _value(data: Json, pointer: str) -> Json:
    try:
        return resolve(data, pointer)
    except LookupError:
        raise InvalidSchedule(f"body{pointer}", "the event has no value here (mapped by the hook's template)") from None
