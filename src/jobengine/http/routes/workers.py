"""``/api/v1/workers``: the workers alive now (the registry of live workers, :mod:`jobengine.fleet`).

A key sees the workers that may run its tenant's jobs: every worker on the store (they serve every tenant)
and the remote workers of its own tenant. How many jobs a worker holds counts every tenant's, so it is shown
to keys with the ``metrics`` scope (an operator's view) only.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.responses import READ, json_response
from jobengine.http.schemas import WorkerList
from jobengine.serialize import worker_to_json

router = APIRouter(prefix="/api/v1", tags=["workers"])


@router.get("/workers", response_model=WorkerList, responses=READ)
async def list_workers(request: Request, principal: Annotated[Principal, Depends(require("jobs:read"))]) -> Response:
    """Live workers, oldest first: host, pid, version, queues, tasks and packs, when seen last."""
    workers = await context(request).engine.fleet.live()
    mine = [w for w in workers if w.tenant is None or w.tenant == principal.tenant]
    counts = principal.allows("metrics")
    return json_response({"items": [worker_to_json(w, in_flight=counts) for w in mine]})
