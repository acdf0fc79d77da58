"""API key text, hashing and scopes."""

from __future__ import annotations

import pytest

from jobengine.core import keys


def test_a_key_is_found_by_its_id_and_matched_by_its_hash() -> None:
    key_id, text = keys.new_key()
    assert text.startswith(f"je_{key_id}_") and len(text) > 50
    assert keys.key_id_of(text) == key_id
    digest = keys.hash_key(text)
    assert keys.key_matches(text, digest) and not keys.key_matches(text + "x", digest)
    assert keys.new_key()[1] != text
    for bad in ("", "je_", "Bearer x", f"je_{key_id}_short", "je_XYZ_" + "a" * 40, text + " "):
        assert keys.key_id_of(bad) is None


def test_scopes() -> None:
    assert keys.check_scopes(["worker", "jobs:read", "worker"]) == ("jobs:read", "worker")
    for bad in ([], ["root"], "admin", None):
        with pytest.raises(ValueError):
            keys.check_scopes(bad)
    assert keys.allows(("admin",), "jobs:write") and keys.allows(("jobs:write",), "jobs:write")
    assert not keys.allows(("jobs:read",), "jobs:write")
