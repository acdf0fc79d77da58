"""Pack manifests are validated strictly, each error naming its field; semantic versions sort as semver says."""

from __future__ import annotations

import pytest

from jobengine.packs import semver
from jobengine.packs.errors import InvalidPack
from jobengine.packs.manifest import from_mapping, loads, payload_errors

GOOD = {
    "name": "hello",
    "version": "1.2.3-rc.1",
    "description": "d",
    "requires": ["PyYAML>=6"],
    "min_engine_version": "0.1.0",
    "tasks": {
        "greet": {"entry": "hello.tasks:greet", "queue": "mail", "max_attempts": 5, "timeout": 2.5,
                  "payload_schema": {"type": "object", "required": ["who"]}},
        "etl": {"phases": [{"name": "extract", "entry": "hello.etl:extract"}, {"name": "load", "entry": "x:y"}]},
    },
}  # fmt: skip


def test_a_good_manifest_parses_from_yaml_and_toml() -> None:
    m = from_mapping(GOOD)
    assert m.name == "hello" and m.task("greet") is not None
    greet = m.task("greet")
    assert (
        greet is not None and greet.queue == "mail" and greet.timeout == 2.5 and greet.phases[0].module == "hello.tasks"
    )
    etl = m.task("etl")
    assert etl is not None and etl.explicit_phases and [p.name for p in etl.phases] == ["extract", "load"]
    toml = b'name = "hello"\nversion = "0.1.0"\n[tasks.greet]\nentry = "hello.tasks:greet"\n'
    assert loads(toml, "jobengine-pack.toml").task("greet") is not None
    assert from_mapping(m.to_json()) == m  # the stored JSON form parses back to the same manifest


def _with(path: str, value: object) -> dict[str, object]:
    import copy

    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: dict[str, object] = data
    for p in parents:
        node = node[p]  # type: ignore[assignment]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("name", "Hello", "name"),
        ("name", "a" * 65, "name"),
        ("version", "1.2", "version"),
        ("version", "01.2.3", "version"),
        ("min_engine_version", "x", "min_engine_version"),
        ("requires", ["not a requirement!!"], "requires[0]"),
        ("requires", ["pkg @ https://evil.example/pkg.whl"], "requires[0]"),
        ("tasks", {}, "tasks"),
        ("surprise", 1, "surprise"),
        ("tasks.greet.entry", "hello.tasks.greet", "tasks.greet.entry"),
        ("tasks.greet.entry", "../x:y", "tasks.greet.entry"),
        ("tasks.greet.queue", "bad queue", "tasks.greet.queue"),
        ("tasks.greet.max_attempts", 0, "tasks.greet.max_attempts"),
        ("tasks.greet.max_attempts", True, "tasks.greet.max_attempts"),
        ("tasks.greet.timeout", -1, "tasks.greet.timeout"),
        ("tasks.greet.payload_schema", {"type": "objekt"}, "tasks.greet.payload_schema.type"),
        ("tasks.greet.payload_schema", {"required": "who"}, "tasks.greet.payload_schema.required"),
        ("tasks.greet.payload_schema", [1], "tasks.greet.payload_schema"),
        ("tasks.greet.colour", "red", "tasks.greet.colour"),
        ("tasks.etl.phases", [{"name": "a", "entry": "m:f"}, {"name": "a", "entry": "m:g"}], "tasks.etl.phases"),
        ("tasks.etl.phases", [{"name": "a"}], "tasks.etl.phases[0]"),
        ("tasks.bad name", {"entry": "m:f"}, "tasks.bad name"),
    ],
)
def test_a_bad_field_is_refused_naming_it(path: str, value: object, field: str) -> None:
    with pytest.raises(InvalidPack) as info:
        from_mapping(_with(path, value))
    assert info.value.field == field


def test_entry_and_phases_are_exclusive_and_one_is_needed() -> None:
    with pytest.raises(InvalidPack) as info:
        from_mapping(_with("tasks.greet.phases", [{"name": "a", "entry": "m:f"}]))
    assert info.value.field == "tasks.greet"
    with pytest.raises(InvalidPack) as info:
        from_mapping(_with("tasks.greet.entry", _DELETE))
    assert info.value.field == "tasks.greet"


def test_unparseable_files_name_the_manifest() -> None:
    for text, name in ((b"name: [", "jobengine-pack.yaml"), (b"name = ", "jobengine-pack.toml"), (b"\xff", "x.yaml")):
        with pytest.raises(InvalidPack) as info:
            loads(text, name)
        assert info.value.field == "manifest"


def test_payload_errors_name_the_path() -> None:
    schema = {"type": "object", "required": ["who"], "properties": {"who": {"type": "string"}}}
    assert payload_errors(schema, {"who": "ann"}) == []
    assert payload_errors(schema, {"who": 3}) == ["who: 3 is not of type 'string'"]
    assert "'who' is a required property" in payload_errors(schema, {})[0]


def test_semver_precedence() -> None:
    ordered = ["0.9.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
               "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.2.0", "1.10.0", "2.0.0"]  # fmt: skip
    shuffled = list(reversed(ordered))
    assert sorted(shuffled, key=semver.sort_key) == ordered
    assert semver.parse("1.0.0+build.5") == semver.parse("1.0.0")
    assert str(semver.parse("1.2.3-rc.1+b")) == "1.2.3-rc.1+b"
    for bad in ("1", "1.2", "v1.2.3", "1.2.3-", "1.2.3-01", "1.2.3.4", "", None, 123):
        assert not semver.is_valid(bad)
