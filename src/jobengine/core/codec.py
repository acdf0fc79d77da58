"""The one JSON encoding of jobengine: RFC 8785 (JSON Canonicalization Scheme) text, UTF-8.

Every payload, result, event datum, queue message and API body goes through :func:`dumps`, so equal values
are byte-equal wherever they are written (the idempotency check compares them; a message re-serialised by
any process is the message it received):

- no whitespace; object keys sorted by their UTF-16 code units (RFC 8785 §3.2.3), which differs from
  Python's code point order only for keys mixing characters above U+FFFF with U+E000-U+FFFF;
- strings as ECMAScript's ``JSON.stringify`` writes them: only ``"``, ``\\`` and control characters are
  escaped (``\\b \\t \\n \\f \\r``, else ``\\u00xx`` in lower-case hex); everything else is literal UTF-8;
- numbers as ECMAScript's ``Number.prototype.toString`` writes them (RFC 8785 §3.2.2.3): the shortest
  digits that read back as the same double, ``1.0`` as ``1``, ``-0.0`` as ``0``, exponent form only below
  1e-6 or from 1e21 (``1e+21``, ``5e-324``);
- NaN and infinities are refused, so are keys that are not strings.

One deliberate departure: an integer outside the IEEE 754 safe range (|n| > 2**53) is written with all of
its digits (``12345678901234567890``), where a strict RFC 8785 writer would first round it to a double.
Python keeps such integers exactly, and rounding them would silently change a payload. Within the safe
range, which is every number a JavaScript or Go reader can hold exactly, the output is RFC 8785's.

Usage::

    codec.dumps({"b": 1.0, "a": [1e21, "é"]})     # '{"a":[1e+21,"é"],"b":1}'
    codec.dumpb(value)                            # the same, as UTF-8 bytes (refuses lone surrogates)
    codec.loads('{"a":1}')                        # {'a': 1}; NaN / Infinity literals are refused
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

import orjson

from jobengine.errors import InvalidJob

_SAFE_INT: Final = 2**53
_NOT_NUMBERS: Final = frozenset({"nan", "inf", "-inf"})

# The C string escaper of the json module writes exactly what JSON.stringify writes for a valid string:
# ", \ and U+0000-U+001F escaped (short forms where they exist, else \u00xx in lower case), nothing else.
_string: Callable[[str], str] = json.encoder.encode_basestring


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_decoder = json.JSONDecoder(parse_constant=_refuse_constant)


class _Unencodable(Exception):
    pass


def number(value: float) -> str:
    """ECMAScript's ``Number.prototype.toString`` of a finite double (RFC 8785 §3.2.2.3)."""
    text = float.__repr__(value)
    if text in _NOT_NUMBERS:
        raise _Unencodable(f"{text} is not a JSON number")
    if "e" not in text and not text.endswith(".0"):
        # Python writes the same shortest digits, in positional form from 1e-4 to 1e16: identical.
        return text
    if value == 0:
        return "0"  # -0.0 too
    if text.endswith(".0") and -_SAFE_INT < value < _SAFE_INT:
        return str(int(value))
    sign = "-" if value < 0 else ""
    digits, point = _shortest(text.lstrip("-"))
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    exponent = point - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if exponent > 0 else '-'}{abs(exponent)}"


def _shortest(text: str) -> tuple[str, int]:
    """Python's shortest round-trip digits of a positive double, as (digits, n): value = 0.digits * 10**n."""
    mantissa, _, exp = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0") or "0", point


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _encode(value: Any, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(_string(value))
    elif kind is dict:
        _object(value, out)
    elif kind is list or kind is tuple:
        _array(value, out)
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        out.append(number(value))
    # Subclasses (StrEnum, IntEnum, OrderedDict...) encode as their base type, as the json module does.
    elif isinstance(value, str):
        out.append(_string(str.__str__(value)))
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(number(value))
    elif isinstance(value, dict):
        _object(value, out)
    elif isinstance(value, list | tuple):
        _array(value, out)
    else:
        raise _Unencodable(f"Object of type {kind.__name__} is not JSON serializable")


def _object(value: dict[Any, Any], out: list[str]) -> None:
    if not value:
        out.append("{}")
        return
    keys = list(value)
    for key in keys:
        if type(key) is not str and not isinstance(key, str):
            raise _Unencodable(f"keys must be strings, not {type(key).__name__} ({key!r})")
    keys.sort()
    if not all(key.isascii() for key in keys):
        keys.sort(key=_utf16)
    sep = "{"
    for key in keys:
        out.append(sep)
        out.append(_string(key))
        out.append(":")
        _encode(value[key], out)
        sep = ","
    out.append("}")


def _array(value: list[Any] | tuple[Any, ...], out: list[str]) -> None:
    if not value:
        out.append("[]")
        return
    sep = "["
    for item in value:
        out.append(sep)
        _encode(item, out)
        sep = ","
    out.append("]")


def dumps(value: Any, field: str = "payload") -> str:
    """The canonical text of ``value``. Raises :class:`InvalidJob` naming ``field`` when it is not JSON."""
    out = _by_orjson(value)
    return out.decode() if out is not None else _written(value, field)


def _written(value: Any, field: str) -> str:
    out: list[str] = []
    try:
        _encode(value, out)
    except _Unencodable as exc:
        raise InvalidJob(field, f"must be JSON-serialisable ({exc})") from None
    except RecursionError:
        raise InvalidJob(field, "must be JSON-serialisable (nested too deeply, or circular)") from None
    return "".join(out)


def dumpb(value: Any, field: str = "payload") -> bytes:
    """:func:`dumps` as UTF-8 bytes: what goes on a wire. Also refuses strings that are not valid Unicode
    (a lone surrogate such as ``"\\ud800"``), which have no UTF-8 form."""
    out = _by_orjson(value)
    if out is not None:
        return out
    text = _written(value, field)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidJob(field, f"must be valid Unicode ({exc.reason} at character {exc.start})") from None


# orjson writes what the canonical writer does except for floats, which it writes as their shortest digits
# in other forms in two cases: an integral float (``1.0``, ``1e+16``; canonical ``1``,
# ``10000000000000000``) and one from 1e-6 to 1e-5 (``5e-6``; canonical ``0.000005``). Both leave a mark
# no other canonical number has: a number ending ``.0``, an ``e+``, an ``e-6``. A string that happens to
# hold one only sends its value to the canonical writer. Keys sort alike unless they mix characters from
# U+E000 with characters above U+FFFF, which start with bytes 0xEE-0xF4. orjson also writes NaN and the
# infinities as null, and some types the canonical writer refuses (UUIDs, enums): it is given only values
# known to hold neither.
# The marks are looked for one at a time: a search for a literal skips ahead in C, where one alternation of
# them would try every byte of the text.
_INTEGRAL = re.compile(rb"\.0(?:[,}\]]|\Z)")
_SMALL = re.compile(rb"e-6(?:[,}\]]|\Z)")
_SORTS_APART = re.compile(rb"[\xee-\xf4]")


def orjson_canonical(out: bytes) -> bool:
    """Whether ``out``, orjson's sorted-keys text of a value holding only JSON types and finite numbers, is
    that value's canonical text: it holds none of the marks above."""
    if b"e+" in out or (b"e-6" in out and _SMALL.search(out) is not None) or _INTEGRAL.search(out) is not None:
        return False
    return out.isascii() or _SORTS_APART.search(out) is None


def _by_orjson(value: Any) -> bytes | None:
    """The canonical text of a flat object (:func:`_flat`; not an empty one, which the writer makes cheaper) by
    orjson; None for any other value, or where orjson's text is not the canonical one."""
    if type(value) is not dict or not value or not _flat(value):
        return None
    try:
        out: bytes = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a lone surrogate: the canonical writer decides
        return None
    return out if orjson_canonical(out) else None


_PLAIN: Final = frozenset({str, int, bool, type(None)})


def _flat(value: dict[Any, Any]) -> bool:
    """Whether ``value`` is a flat object of strings, integers within 2**53, booleans, nulls and non-integral
    finite floats under ASCII keys: the usual payload, whose text and copy take shortcuts."""
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return False
        kind = type(item)
        if kind is int:
            if not -_SAFE_INT <= item <= _SAFE_INT:  # huge ones meet int <-> str limits in dumps / loads
                return False
        elif kind not in _PLAIN and not (kind is float and item - item == 0 and not item.is_integer()):
            return False
    return True


def normalize(value: Any, field: str = "payload") -> Any:
    """``loads(dumps(value, field))``: the value as a reader of its canonical text gets it back (tuples
    become lists, ``1.0`` becomes ``1``, keys come in canonical order), validated the same way. A flat
    object (:func:`_flat`), the usual payload, is copied without the text round trip (a fifth of the cost)."""
    if type(value) is dict and _flat(value):
        keys = list(value)
        ordered = sorted(keys)
        if ordered == keys:  # already in canonical order (the usual payload): a C-level copy, cheaper
            return value.copy()  # than the comprehension (docs/decisions/0021-enqueue-client-instructions.md)
        return {key: value[key] for key in ordered}
    return loads(dumps(value, field))


def loads(text: str | bytes | None) -> Any:
    """Parse JSON text (None gives None). Raises ValueError for invalid JSON and for NaN / Infinity."""
    if text is None:
        return None
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8")
    return _decoder.decode(text)


def canonical(text: str | bytes) -> bytes:
    """Re-serialise JSON text canonically: ``dumpb(loads(text))``."""
    return dumpb(loads(text))
