"""How a trigger's JSON reaches a run's jobs (jobengine.core.mapping): JSON Pointers, the payload and items a
template gets, and the field named when the data or the mapping is wrong."""

from __future__ import annotations

import pytest

from jobengine.core.mapping import TriggerMapping, resolve
from jobengine.core.schedules import JobTemplate
from jobengine.errors import InvalidSchedule

DOC = {"a": {"b/c": [10, {"~d": "deep"}]}, "": "empty key", "list": [1, 2]}


@pytest.mark.parametrize(
    ("pointer", "value"),
    [("", DOC), ("/a/b~1c/0", 10), ("/a/b~1c/1/~0d", "deep"), ("/", "empty key"), ("/list/1", 2)],
)
def test_json_pointers(pointer: str, value: object) -> None:
    assert resolve(DOC, pointer) == value


@pytest.mark.parametrize("pointer", ["/nope", "/list/2", "/list/01", "/list/-1", "/list/x", "/a/b~1c/0/x"])
def test_json_pointers_that_name_nothing(pointer: str) -> None:
    with pytest.raises(LookupError):
        resolve(DOC, pointer)


def test_a_mapping_sets_payload_keys_and_items() -> None:
    template = JobTemplate(task="deploy", payload={"env": "prod", "ref": "old"}, segment_size=2)
    mapping = TriggerMapping.from_json({"payload": {"ref": "/ref", "all": ""}, "items": "/files"})
    data = {"ref": "main", "files": ["a", "b", "c"]}
    mapped = mapping.apply(template, data)
    assert mapped.payload == {"env": "prod", "ref": "main", "all": data} and mapped.items == ("a", "b", "c")
    assert mapped.segment_size == 2 and mapped.task == "deploy"
    assert TriggerMapping.from_json(mapping.to_json()) == mapping
    assert TriggerMapping().apply(template, data) is template  # nothing mapped: the template as it is
    assert TriggerMapping.from_json({"payload": {"x": "/ref"}}).apply(JobTemplate(task="t"), data).payload == {
        "x": "main"
    }


def test_what_is_refused_names_the_field() -> None:
    template = JobTemplate(task="deploy", payload={"env": "prod"})
    mapping = TriggerMapping.from_json({"payload": {"ref": "/ref"}, "items": "/files"})
    cases = [
        (lambda: mapping.apply(template, {"files": []}), "body/ref"),
        (lambda: mapping.apply(template, {"ref": "x", "files": {"a": 1}}), "body/files"),
        (lambda: mapping.apply(template, "just a string"), "body/ref"),
        (lambda: mapping.apply(JobTemplate(task="t", payload=[1]), {"ref": 1, "files": []}), "template.payload"),
        (lambda: mapping.apply(JobTemplate(task="t", planner="p"), {"ref": 1, "files": []}), "template.items"),
        (lambda: TriggerMapping.from_json({"payload": {"ref": "ref"}}), "template.payload.ref"),
        (lambda: TriggerMapping.from_json({"items": 3}), "template.items"),
        (lambda: TriggerMapping.from_json({"payload": ["/a"]}), "template.payload"),
        (lambda: TriggerMapping.from_json({"itemz": "/a"}), "template.itemz"),
        (lambda: TriggerMapping.from_json("nope"), "template"),
    ]
    for call, field in cases:
        with pytest.raises(InvalidSchedule) as raised:
            call()
        assert raised.value.field == field, (field, raised.value)
