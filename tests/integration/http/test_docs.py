"""``/docs`` works offline: the page loads Swagger UI from the app's own vendored files, never a CDN."""

from __future__ import annotations

import re
import threading
from typing import Any

import httpx

from jobengine.http.docs import ASSETS, STATIC_PATH

from .conftest import Api

#: Every URL a tag of the page loads (script src, link href), and any absolute http(s) URL at all.
_LOADED = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["']([^"']+)["']""", re.IGNORECASE)
_ABSOLUTE = re.compile(r"https?://[^\s\"'<>]+")


async def test_docs_page_loads_only_local_assets(api: Api) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://api") as c:
        page = await c.get("/docs")  # no key: the docs are public, like /openapi.json
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        html = page.text
        assert not _ABSOLUTE.findall(html), f"the page names another host: {_ABSOLUTE.findall(html)}"
        loaded = set(_LOADED.findall(html))
        assert loaded == {f"{STATIC_PATH}/{name}" for name in ASSETS}
        assert "url: '/openapi.json'" in html
        assert "SwaggerUIBundle" in html


async def test_docs_assets_are_served_with_their_content_types(api: Api) -> None:
    expected = {
        "swagger-ui-bundle.min.js": "javascript",
        "swagger-ui.css": "text/css",
        "favicon-32x32.png": "image/png",
    }
    assert set(expected) == set(ASSETS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://api") as c:
        for name, kind in expected.items():
            r = await c.get(f"{STATIC_PATH}/{name}")
            assert r.status_code == 200, name
            assert kind in r.headers["content-type"], (name, r.headers["content-type"])
            assert r.content, name
        bundle = (await c.get(f"{STATIC_PATH}/swagger-ui-bundle.min.js")).text
        assert "SwaggerUIBundle" in bundle
        # Nothing else of the npm package is served (no source maps, no ES bundles), and no ReDoc.
        assert (await c.get(f"{STATIC_PATH}/swagger-ui-bundle.min.js.map")).status_code == 404
        assert (await c.get("/redoc")).status_code == 404


async def test_the_openapi_document_is_built_once_off_the_event_loop(api: Api) -> None:
    """Building it walks every route's models: on the event loop, every other request would wait for it."""
    built_in: list[threading.Thread] = []
    build = api.app.openapi

    def recorded() -> dict[str, Any]:
        built_in.append(threading.current_thread())
        return build()

    api.app.openapi = recorded  # type: ignore[method-assign]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://api") as c:
        first, second = await c.get("/openapi.json"), await c.get("/openapi.json")
    assert first.status_code == 200 and first.json()["info"]["title"] == "jobengine"
    assert first.headers["content-type"] == "application/json"
    assert second.content == first.content
    assert len(built_in) == 1 and built_in[0] is not threading.current_thread()
