"""The OpenAPI document, adjusted after FastAPI builds it: every error response is
``application/problem+json`` with the :class:`Problem` schema (FastAPI would document them as
``application/json``, and its own validation error shape, which this API never sends)."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response

from jobengine.http.problems import PROBLEM_JSON

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes, tags=app.openapi_tags
    )
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict):
                continue
            for status, response in operation.get("responses", {}).items():
                refs = str(response.get("content", {}))
                if status.isdigit() and int(status) >= 400 and ("Problem" in refs or "ValidationError" in refs):
                    response["content"] = {PROBLEM_JSON: {"schema": _PROBLEM_REF}}
    components = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    app.openapi_schema = schema
    return schema


#: Where the document is served.
URL: Final = "/openapi.json"


def install(app: FastAPI, url: str = URL) -> None:
    """Serve the document at ``url``. It is built on its first request, in a thread: building it walks every
    route's models, and on the event loop that would hold up every other request of the process meanwhile
    (workers' claims, streams, the dashboard). The body is rendered once too."""
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
    rendered: list[bytes] = []

    @app.get(url, include_in_schema=False)
    async def openapi_document() -> Response:
        if not rendered:
            body = await asyncio.to_thread(lambda: bytes(JSONResponse(app.openapi()).body))
            rendered[:] = [body]
        return Response(rendered[0], media_type="application/json")
