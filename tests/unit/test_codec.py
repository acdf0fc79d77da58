"""The canonical codec (RFC 8785): fixture files re-serialise to their expected bytes, numbers follow
ECMAScript, and a message body survives a round trip byte for byte.

Fixtures: ``fixtures/codec/<name>.json`` (any formatting) and ``<name>.expected.json`` (the exact bytes).
"""

from __future__ import annotations

import enum
import math
import struct
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobengine.core import codec
from jobengine.errors import InvalidJob
from jobengine.ports.transport import Message

FIXTURES = Path(__file__).parent / "fixtures" / "codec"


class _Colour(enum.Enum):
    RED = "red"


SAMPLES = sorted(p for p in FIXTURES.glob("*.json") if not p.name.endswith(".expected.json"))


def expected(sample: Path) -> bytes:
    return (FIXTURES / f"{sample.stem}.expected.json").read_bytes()


def test_every_sample_has_its_expected_bytes() -> None:
    assert len(SAMPLES) >= 5
    for sample in SAMPLES:
        assert (FIXTURES / f"{sample.stem}.expected.json").exists(), sample.name


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_sample_serialises_to_the_expected_bytes(sample: Path) -> None:
    assert codec.canonical(sample.read_bytes()) == expected(sample)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_expected_bytes_are_a_fixed_point(sample: Path) -> None:
    out = expected(sample)
    assert codec.canonical(out) == out
    assert codec.dumpb(codec.loads(out)) == out
    assert codec.dumps(codec.loads(out.decode())).encode() == out


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_sample_survives_a_message_round_trip(sample: Path) -> None:
    """As a queue message's data: the body re-serialises to itself and carries the canonical payload."""
    message = Message("job-1", "default", run_id="run-1", schedule_id="sch-1", data=codec.loads(sample.read_bytes()))
    body = message.body()
    assert codec.canonical(body) == body
    again = Message.from_body(body)
    assert again == message
    assert again.body() == body
    assert codec.dumpb(again.data) == expected(sample)


# RFC 8785 §3.2.2.3 / appendix B: IEEE 754 bit patterns and their ECMAScript text.
NUMBERS = {
    "0000000000000000": "0",
    "8000000000000000": "0",
    "0000000000000001": "5e-324",
    "8000000000000001": "-5e-324",
    "7fefffffffffffff": "1.7976931348623157e+308",
    "ffefffffffffffff": "-1.7976931348623157e+308",
    "4340000000000000": "9007199254740992",
    "c340000000000000": "-9007199254740992",
    "4430000000000000": "295147905179352830000",
    "44b52d02c7e14af5": "9.999999999999997e+22",
    "44b52d02c7e14af6": "1e+23",
    "44b52d02c7e14af7": "1.0000000000000001e+23",
    "444b1ae4d6e2ef4e": "999999999999999700000",
    "444b1ae4d6e2ef4f": "999999999999999900000",
    "444b1ae4d6e2ef50": "1e+21",
    "3eb0c6f7a0b5ed8c": "9.999999999999997e-7",
    "3eb0c6f7a0b5ed8d": "0.000001",
    "41b3de4355555553": "333333333.3333332",
    "41b3de4355555554": "333333333.33333325",
    "41b3de4355555555": "333333333.3333333",
    "41b3de4355555556": "333333333.3333334",
    "41b3de4355555557": "333333333.33333343",
    "becbf647612f3696": "-0.0000033333333333333333",
    "43143ff3c1cb0959": "1424953923781206.2",
}


@pytest.mark.parametrize(("bits", "text"), NUMBERS.items())
def test_numbers_as_ecmascript_writes_them(bits: str, text: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert codec.number(value) == text
    assert codec.dumps(value) == text
    assert float(text) == value or (value == 0 and float(text) == 0)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_double_reads_back_exactly(value: float) -> None:
    text = codec.number(value)
    assert float(text) == value
    assert codec.dumps(codec.loads(text)) == text


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
        max_leaves=30,
    )
)
def test_canonical_text_is_a_fixed_point(value: object) -> None:
    text = codec.dumps(value)
    assert codec.dumps(codec.loads(text)) == text


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    # U+1F600 is D83D DE00 in UTF-16, which sorts before U+FF01; by code point it would come after.
    assert codec.dumps({"\uff01": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uff01":1}'


@pytest.mark.parametrize(
    "bad",
    [math.nan, math.inf, -math.inf, {1: "a"}, {"a": object()}, b"bytes", {1.5}],
    ids=["nan", "inf", "-inf", "int-key", "object", "bytes", "set"],
)
def test_what_is_not_json_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidJob) as info:
        codec.dumps(bad, "result")
    assert info.value.field == "result"


def test_lone_surrogates_have_no_utf8_form() -> None:
    with pytest.raises(InvalidJob, match="valid Unicode"):
        codec.dumpb({"s": "\ud800"})


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}'])
def test_loads_refuses_non_numbers(text: str) -> None:
    with pytest.raises(ValueError):
        codec.loads(text)


def test_loads_reads_bytes_and_none() -> None:
    assert codec.loads(b'{"a":[1,2.5]}') == {"a": [1, 2.5]}
    assert codec.loads(None) is None


def test_integers_beyond_the_safe_range_keep_every_digit() -> None:
    # The one documented departure from RFC 8785 (which would round to a double first).
    assert codec.dumps(2**64 + 1) == "18446744073709551617"
    assert codec.dumps(-(2**53) - 1) == "-9007199254740993"


# -- the shortcut through orjson for flat objects: byte for byte the canonical writer's text ----------------
_FLAT = st.dictionaries(
    st.text(max_size=6),
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**64), max_value=2**64),
        st.floats(),
        st.floats(min_value=1e-7, max_value=1e-4),  # where orjson writes exponents the canonical text does not
        st.text(max_size=8),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=2000)
@given(_FLAT)
def test_a_flat_object_is_written_as_the_canonical_writer_writes_it(value: dict[str, object]) -> None:
    try:
        expected = codec._written(value, "payload")
    except InvalidJob as exc:
        with pytest.raises(InvalidJob) as caught:
            codec.dumps(value)
        assert caught.value.field == exc.field
        return
    assert codec.dumps(value) == expected
    try:
        wire = expected.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(InvalidJob, match="valid Unicode"):
            codec.dumpb(value)
        return
    assert codec.dumpb(value) == wire


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1.0, "a": 5e-6}, '{"a":0.000005,"b":1}'),
        ({"t": 1e16 + 0.5}, '{"t":10000000000000000}'),
        ({"s": "1.0,", "n": None}, '{"n":null,"s":"1.0,"}'),
        ({"e": "\U0001f600", "f": "\uff01", "k": 2**60}, '{"e":"\U0001f600","f":"\uff01","k":1152921504606846976}'),
        ({"u": "\ud800"}, '{"u":"\ud800"}'),
    ],
    ids=["integral-and-small", "big-float", "mark-in-a-string", "non-ascii-and-big-int", "lone-surrogate"],
)
def test_flat_objects_orjson_writes_otherwise_go_to_the_canonical_writer(value: object, expected: str) -> None:
    assert codec.dumps(value) == expected


@pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": -math.inf}, {"x": uuid.uuid4()}, {"x": _Colour.RED}])
def test_a_flat_object_orjson_could_write_but_json_has_no_value_for_is_refused(bad: object) -> None:
    with pytest.raises(InvalidJob):
        codec.dumps(bad)
    with pytest.raises(InvalidJob):
        codec.dumpb(bad)


# -- normalize: the decoded copy, with a fast path for flat objects -----------------------------------------
_PRIMITIVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.text(max_size=8)
)
_VALUES = st.recursive(
    _PRIMITIVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=8,
)


@settings(max_examples=2000)
@given(st.one_of(_VALUES, st.dictionaries(st.text(max_size=6), _PRIMITIVES, max_size=6)))
def test_normalize_is_the_round_trip_through_the_canonical_text(value: object) -> None:
    try:
        expected = codec.loads(codec.dumps(value))
    except InvalidJob as exc:
        with pytest.raises(InvalidJob) as caught:
            codec.normalize(value)
        assert caught.value.field == exc.field
        return
    got = codec.normalize(value)
    # repr: the same types (1.0 became 1 in both), the same key order, the same values.
    assert repr(got) == repr(expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1.0, "a": -0.0}, {"a": 0, "b": 1}),
        ({"t": 1.5, "s": "é"}, {"s": "é", "t": 1.5}),
        ({"k": (1, 2)}, {"k": [1, 2]}),
        ({1: "x"}, InvalidJob),
        ({"big": 2**80}, {"big": 2**80}),
        ({"x": math.nan}, InvalidJob),
        ({"x": math.inf}, InvalidJob),
    ],
)
def test_normalize_examples(value: object, expected: object) -> None:
    if expected is InvalidJob:
        with pytest.raises(InvalidJob):
            codec.normalize(value)
    else:
        got = codec.normalize(value)
        assert got == expected and list(got) == list(expected)  # type: ignore[arg-type]
        assert got is not value


def test_normalize_fails_as_the_round_trip_does_on_an_integer_past_the_digit_limit() -> None:
    huge = {"n": 10**5000}  # beyond sys.get_int_max_str_digits(): int <-> str refuses it
    with pytest.raises(ValueError) as expected:
        codec.loads(codec.dumps(huge))
    with pytest.raises(type(expected.value)):
        codec.normalize(huge)
