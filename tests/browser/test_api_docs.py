"""``/docs`` in a real browser that may reach nothing but the server: Swagger UI renders the API's
operations from the app's own vendored files (see conftest.py for the server and the browser)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from .conftest import Server

pytestmark = pytest.mark.timeout(300)


def test_docs_render_the_operations_with_no_other_host_reachable(browser: Any, server: Server) -> None:
    own = urlsplit(server.url).netloc
    context = browser.new_context(base_url=server.url)
    context.set_default_timeout(60_000)  # a 1.7 MB bundle on a busy machine
    elsewhere: list[str] = []
    served: list[str] = []

    def route(r: Any) -> None:
        url = r.request.url
        if urlsplit(url).netloc == own:
            served.append(urlsplit(url).path)
            r.continue_()
        else:  # offline: another host does not answer
            elsewhere.append(url)
            r.abort("internetdisconnected")

    context.route("**/*", route)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto("/docs")
        page.locator(".opblock-summary-path", has_text="/api/v1/jobs").first.wait_for(state="visible")
        assert page.locator(".opblock").count() > 10
        assert page.locator(".info .title", has_text="jobengine").is_visible()
        assert not elsewhere, f"/docs asked other hosts: {elsewhere}"
        assert not errors, errors
        assert {
            "/docs",
            "/openapi.json",
            "/docs/static/swagger-ui-bundle.min.js",
            "/docs/static/swagger-ui.css",
        } <= set(served)
    finally:
        context.close()
