"""The migrations shipped with a SQL backend: versioned files ``migrations/NNNN_name.sql`` in its package,
the same version meaning the same change on every backend."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from jobengine.errors import StoreError

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def shipped(package: str) -> list[Migration]:
    """The migrations in ``package``'s ``migrations`` folder, oldest first. Raises StoreError on a duplicate
    version."""
    found: dict[int, Migration] = {}
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _FILE_RE.match(entry.name)
        if match is None:
            continue
        version = int(match.group(1))
        if version in found:
            raise StoreError(f"{package}: two migrations have version {version}")
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]
