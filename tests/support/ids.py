"""Ids that share a prefix, for tests of ambiguous id prefixes."""

from __future__ import annotations

import itertools

from jobengine.core.selection import MIN_PREFIX


def shared_prefix(ids: list[str]) -> tuple[str, set[str]]:
    """The longest prefix two ids made one after the other share, and those two. UUIDv7s made within a
    minute share at least their first eight hex digits unless a 65-second window ends between them, which
    happens between two of three ids at most."""
    pairs = []
    for a, b in itertools.pairwise(ids):
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        pairs.append((a[:n], {a, b}))
    prefix, pair = max(pairs, key=lambda p: len(p[0]))
    assert len(prefix) >= MIN_PREFIX, ids
    return prefix, pair
