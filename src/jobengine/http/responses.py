"""JSON answers in the one encoding of :mod:`jobengine.core.codec`, and the problem statuses each kind of
route documents."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from jobengine.core import codec
from jobengine.http.problems import problem_responses


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(codec.dumps(data, "response").encode(), status, headers=dict(headers or {}),
                    media_type="application/json")  # fmt: skip


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
