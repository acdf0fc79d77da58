"""JSON answers in the one encoding of :mod:`jobengine.core.codec`, and the problem statuses each kind of
route documents."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from jobengine.core import codec
from jobengine.http.problems import problem_responses

# orjson writes what the canonical writer does except for floats, which it writes as their shortest digits
# in other forms in two cases: an integral float (``1.0``, ``1e+16``; canonical ``1``,
# ``10000000000000000``) and one from 1e-6 to 1e-5 (``5e-6``; canonical ``0.000005``). Both leave a mark
# no other canonical number has: a number ending ``.0``, an ``e+``, an ``e-6``. A string that happens to
# hold one only sends its body to the canonical writer. Keys sort alike unless they mix characters from
# U+E000 with characters above U+FFFF, which start with bytes 0xEE-0xF4.
# The marks are looked for one at a time: a search for a literal skips ahead in C, where one alternation of
# them would try every byte of the answer.
_INTEGRAL = re.compile(rb"\.0(?:[,}\]]|\Z)")
_SMALL = re.compile(rb"e-6(?:[,}\]]|\Z)")
_SORTS_APART = re.compile(rb"[\xee-\xf4]")


def _canonical(out: bytes) -> bool:
    """Whether orjson's text ``out`` holds none of the marks above."""
    if b"e+" in out or (b"e-6" in out and _SMALL.search(out) is not None) or _INTEGRAL.search(out) is not None:
        return False
    return out.isascii() or _SORTS_APART.search(out) is None


def encode(data: Any) -> bytes:
    """``codec.dumpb(data)``, by orjson when its text is that (see above): the API's answers hold many jobs'
    fields, which the pure-Python canonical writer spends most of a batch request's CPU on. Unlike the
    canonical writer, orjson writes NaN and infinities as null; an answer is built from stored values, which
    cannot hold them."""
    try:
        out: bytes = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits, a key that is not a string, a lone surrogate...
        return codec.dumpb(data, "response")  # which writes it, or raises its own error
    return out if _canonical(out) else codec.dumpb(data, "response")


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(encode(data), status, headers=dict(headers or {}), media_type="application/json")


#: Every authenticated route can answer these.
AUTH = (401, 403, 503)
READ = problem_responses(*AUTH, 422)
READ_ONE = problem_responses(*AUTH, 404, 422)
#: A read of one resource that only some of its kind have (a simulate run's diff): 409 for the others.
READ_ONE_IF = problem_responses(*AUTH, 404, 409, 422)
#: A POST with a JSON body: bad JSON, too large, not JSON, invalid, and the Idempotency-Key answers.
WRITE = problem_responses(*AUTH, 400, 409, 413, 415, 422)
WRITE_ONE = problem_responses(*AUTH, 400, 404, 409, 413, 415, 422)
#: Enqueueing adds flow control's 429 (the queue is past its hard limit); its 503 is among AUTH's.
ENQUEUE = problem_responses(*AUTH, 400, 409, 413, 415, 422, 429)
