"""The interactive API docs at ``/docs``: Swagger UI served from the app's own files, so the page works
on a machine with no route to the internet (like the dashboard, which vendors its scripts).

FastAPI's built-in page loads Swagger UI and its favicon from public CDNs; this one points at
``/docs/static/`` instead, where ``static/`` holds ``swagger-ui-dist``'s bundle, stylesheet and favicon,
unmodified (version and licence in ``static/VENDORED.txt``). ReDoc is not served. Usage::

    app = FastAPI(docs_url=None, redoc_url=None)
    install(app)        # http/app.py does this
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

__all__ = ["ASSETS", "DOCS_PATH", "STATIC_PATH", "install"]

DOCS_PATH = "/docs"
STATIC_PATH = "/docs/static"
STATIC = Path(__file__).parent / "static"
#: The files the page loads, each served under ``STATIC_PATH``.
ASSETS = ("swagger-ui-bundle.min.js", "swagger-ui.css", "favicon-32x32.png")


def install(app: FastAPI, *, openapi_url: str = "/openapi.json") -> None:
    """Serve Swagger UI for ``openapi_url`` at ``DOCS_PATH`` and its files at ``STATIC_PATH``."""
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC), name="docs-static")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.min.js",
            swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PATH}/favicon-32x32.png",
            # Swagger UI would otherwise ask validator.swagger.io about the spec; API keys are bearer
            # tokens, so no OAuth2 redirect page is needed either.
            swagger_ui_parameters={"validatorUrl": None},
        )
