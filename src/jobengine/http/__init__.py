"""The HTTP API (REST, SSE, worker protocol): :func:`create_app` builds a FastAPI app around an Engine."""

from jobengine.http.app import create_app

__all__ = ["create_app"]
