"""The HTTP API's answer encoder: orjson where its text is the canonical one, the canonical writer elsewhere,
byte for byte the same as ``codec.dumpb`` (the codec's fixtures, edge cases, random values)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobengine.core import codec
from jobengine.errors import InvalidJob
from jobengine.http import responses
from jobengine.serialize import int_if_whole

FIXTURES = Path(__file__).parent / "fixtures" / "codec"

# Values whose orjson text is not canonical, and strings that only look like such text.
EDGES: list[Any] = [
    1.0, -0.0, 0.0, 5e-6, -9.99e-6, 1e-6, 1e-7, 1e-5, 1e16, 1e20, 1e21, 2.0**53, 5e-324, 1.7976931348623157e308,
    0.1, 123.456, 1732872000.123,
    [1.0, 2.5, {"a": 3.0}], {"a": 1e16}, {"a": 5e-6}, {"a": [5e-6]},
    "v1.0,", "x e+ y", "e-6]", ["1.0", "e-6,"],
    {"\ue000": 1, "\U0001f600": 2, "a": 3}, {"é": 1, "e": 2}, "漢字😀", "\u2028\x7f\x00\n",
    2**63, -(2**63), 2**64, -(2**70), 10**30,
    {"b": True, "a": None, "c": [], "d": {}},
]  # fmt: skip


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_edge_values_are_written_as_the_canonical_writer_writes_them(value: Any) -> None:
    assert responses.encode(value) == codec.dumpb(value)


@pytest.mark.parametrize("sample", sorted(FIXTURES.glob("*.expected.json")), ids=lambda p: p.stem)
def test_the_codec_fixtures_are_written_byte_for_byte(sample: Path) -> None:
    expected = sample.read_bytes()
    assert responses.encode(codec.loads(expected)) == expected


def _bits_to_float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(0, 2**64 - 1).map(_bits_to_float).filter(lambda x: x - x == 0),
    st.integers(-(10**6), 10**6).flatmap(lambda m: st.integers(-9, 22).map(lambda e: m * 10.0**e)),
)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), _floats, st.text(max_size=12))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=2000, deadline=None)
@given(_values)
def test_random_values_are_written_as_the_canonical_writer_writes_them(value: Any) -> None:
    try:
        want = codec.dumpb(value)
    except InvalidJob:  # a lone surrogate: both refuse it
        with pytest.raises(InvalidJob):
            responses.encode(value)
        return
    assert responses.encode(value) == want


def test_a_job_answer_takes_the_fast_path() -> None:
    """The usual answer (jobs whose progress and timeout are integral) is orjson's text as it is."""
    job = {
        "id": "01a226f3-ab88-7000-8410-84dd4c8d9ae0", "progress": int_if_whole(0.0), "timeout": int_if_whole(30.0),
        "payload": {"t": 1732872000.123, "to": "ada@example.com"}, "run_at": "2026-11-29T10:00:00.000+00:00",
    }  # fmt: skip
    assert int_if_whole(0.0) == 0 and type(int_if_whole(0.0)) is int
    assert int_if_whole(0.5) == 0.5 and int_if_whole(None) is None and int_if_whole(2.0**60) == 2.0**60
    body = {"jobs": [job] * 3, "created": [True] * 3}
    assert responses.encode(body) == orjson.dumps(body, option=orjson.OPT_SORT_KEYS) == codec.dumpb(body)


def test_values_the_canonical_writer_refuses_are_refused() -> None:
    with pytest.raises(InvalidJob):
        responses.encode({1: "a key that is not a string"})
    with pytest.raises(InvalidJob):
        responses.encode({"a": object()})
