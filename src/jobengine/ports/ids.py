"""Ids by a unique prefix: the IdIndex port and :func:`resolve_id`, the one resolver every edge uses.

A whole id always names its thing; a shorter text names the one id that starts with it, if it has at
least MIN_PREFIX characters. Jobs, runs, schedules, webhook endpoints and deliveries, API keys and
failure signatures resolve alike, so a short id (:func:`jobengine.core.ids.short_id`) pasted from the
dashboard or the CLI works wherever an id is taken.
"""

from __future__ import annotations

from typing import Final, Protocol

from jobengine.core.ids import IdKind
from jobengine.core.models import ID_CHARS
from jobengine.core.selection import MIN_PREFIX
from jobengine.errors import AmbiguousId, InvalidJob, NotFound

#: Candidates named when a prefix is ambiguous.
CANDIDATES_SHOWN: Final = 5


class IdIndex(Protocol):
    """Ids by prefix, on the primary keys of a store's tables."""

    async def ids_with_prefix(self, kind: IdKind, prefix: str, tenant: str | None, limit: int) -> list[str]:
        """Up to ``limit`` ids of ``kind`` that start with ``prefix`` (of ``tenant`` when given) in id order,
        so an id equal to ``prefix`` comes first."""
        ...


async def resolve_id(index: IdIndex, kind: IdKind, ident: str, tenant: str | None = None) -> str:
    """The id of ``kind`` that is ``ident`` or, failing that, the only one starting with it. Usage::

        run_id = await resolve_id(store, IdKind.RUN, "0193a1b2-c3d4-7005", tenant="acme")

    Raises InvalidJob (field ``<kind>_id``) for text no id holds, NotFound when no id matches (saying so
    when ``ident`` is shorter than MIN_PREFIX) and AmbiguousId naming a few ids when several do."""
    field = f"{kind.value}_id"
    if not ident or len(ident) > 100 or not set(ident) <= ID_CHARS:
        raise InvalidJob(field, "an id is 1 to 100 letters, digits or _ . : -")
    found = await index.ids_with_prefix(kind, ident, tenant, CANDIDATES_SHOWN + 1)
    if found and found[0] == ident:
        return ident
    if len(ident) < MIN_PREFIX:
        raise NotFound(kind.noun, ident, f"an id prefix needs at least {MIN_PREFIX} characters")
    if not found:
        raise NotFound(kind.noun, ident)
    if len(found) > 1:
        raise AmbiguousId(kind.value, ident, found[:CANDIDATES_SHOWN])
    return found[0]
