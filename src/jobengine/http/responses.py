"""JSON answers in the one encoding of :mod:`jobengine.core.codec`, and the problem statuses each kind of
route documents."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from jobengine.core import codec
from jobengine.http.problems import problem_responses


def encode(data: Any) -> bytes:
    """``codec.dumpb(data)``, by orjson when its text is that (``codec.orjson_canonical``): the API's answers
    hold many jobs' fields, which the pure-Python canonical writer spends most of a batch request's CPU on.
    Unlike the canonical writer, orjson writes NaN and infinities as null; an answer is built from stored
    values, which cannot hold them."""
    try:
        out: bytes = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits, a key that is not a string, a lone surrogate...
        return codec.dumpb(data, "response")  # which writes it, or raises its own error
    return out if codec.orjson_canonical(out) else codec.dumpb(data, "response")


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
