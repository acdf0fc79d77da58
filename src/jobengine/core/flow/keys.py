"""The text form of a payload field used as a concurrency key (the same on every backend for strings and
integers, the usual keys)."""

from __future__ import annotations

from jobengine.core import codec
from jobengine.core.models import Json


def payload_key(payload: Json, name: str) -> str | None:
    """``payload[name]`` as text: a string as itself, anything else as canonical JSON; None if the payload
    is not an object or has no such field (or it is null)."""
    if not isinstance(payload, dict):
        return None
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return codec.dumps(value, name)
