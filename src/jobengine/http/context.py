"""What the routes of one app share, kept on ``app.state`` (never in a module global): the engine facade,
the settings, the key cache and the metrics of this app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection

from jobengine.engine import Engine
from jobengine.settings import Settings

if TYPE_CHECKING:
    from jobengine.http.auth import Authenticator
    from jobengine.http.metrics import Metrics


@dataclass
class ApiContext:
    engine: Engine
    settings: Settings
    auth: Authenticator
    metrics: Metrics
    #: Set when the server is stopping: open streams and long-polls end, so shutdown need not wait on them.
    closing: bool = False


def context(conn: HTTPConnection) -> ApiContext:
    ctx = conn.app.state.jobengine
    assert isinstance(ctx, ApiContext)
    return ctx
