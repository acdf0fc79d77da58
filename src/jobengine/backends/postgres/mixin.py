"""What the store's mixins (api, flow, outbox, packs, reads) need of :class:`PostgresStore`: one Protocol
for their ``self``, and their statements' text in its schema."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import psycopg

from jobengine.backends.postgres.sql import prefix

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]
Row = tuple[Any, ...]


class StoreCalls(Protocol):
    """The store as a mixin's methods see it: its schema and its two ways to run a statement."""

    schema: str

    async def _run(self, op: Callable[[Conn], Awaitable[T]], *, retry: bool = True) -> T: ...

    async def _rows(self, query: bytes, params: Mapping[str, Any], *, retry: bool = True) -> list[Row]: ...


def qualify(store: StoreCalls, text: str) -> bytes:
    """``text`` with ``{s}`` naming the store's schema, encoded as psycopg prepares it."""
    return text.replace("{s}", prefix(store.schema)).encode()
