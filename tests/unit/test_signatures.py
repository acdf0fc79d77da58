"""Fingerprints: the same bug with different ids, numbers, hex and paths is one signature; two bugs are two."""

from __future__ import annotations

import traceback
import uuid

from jobengine.core.ids import JobId
from jobengine.core.signatures import (
    SignatureHit,
    SignatureStatus,
    fingerprint,
    mask,
    own_frames,
    record,
)
from jobengine.scheduler.signatures import EXCLUDED_FRAMES


def test_masking() -> None:
    assert mask(f"order {uuid.uuid4()} not found") == "order <uuid> not found"
    assert mask("at 0x7f3a2b10 in deadbeef42cafe") == "at <hex> in <hex>"
    assert mask("cannot open /srv/data/2024/in.csv or C:\\tmp\\x.txt") == "cannot open <path> or <path>"
    assert mask("user_12345 owes 12.50, retry   3") == "user_<n> owes <n>, retry <n>"
    assert mask("x" * 5000) == "x" * 500


def _traceback_of(fn: object) -> str:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError("did not raise")


def load_order(order_id: str) -> None:
    raise KeyError(f"order {order_id} missing from /var/cache/orders/{order_id[:4]}.json")


def parse_date(text: str) -> None:
    raise ValueError(f"bad date {text!r}")


def test_one_bug_with_different_ids_is_one_fingerprint() -> None:
    prints = set()
    for _ in range(100):
        order = str(uuid.uuid4())
        tb = _traceback_of(lambda order=order: load_order(order))
        prints.add(fingerprint("KeyError", f"'order {order} missing'", tb, EXCLUDED_FRAMES))
    assert len(prints) == 1
    (fp,) = prints
    assert fp.message == "'order <uuid> missing'"
    assert fp.frames[0] == "test_signatures.py:load_order"  # innermost frame of the task's own code
    other = fingerprint("ValueError", "bad date 'x'", _traceback_of(lambda: parse_date("x")), EXCLUDED_FRAMES)
    assert other.key != fp.key


def test_frames_leave_out_jobengine_and_the_standard_library() -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/asyncio/tasks.py", line 1, in run\n'
        '  File "/venv/site-packages/jobengine/worker/runtime.py", line 2, in _call\n'
        '  File "/app/tasks/billing.py", line 3, in charge\n'
        '  File "/venv/site-packages/stripe/api.py", line 4, in post\n'
        "ValueError: nope\n"
    )
    assert own_frames(tb, ("/usr/lib/python3.11/", "/venv/site-packages/jobengine/")) == ("billing.py:charge",)
    assert own_frames(None, ()) == ()
    # Only library frames: they count (better than nothing).
    lib = 'Traceback (most recent call last):\n  File "/venv/site-packages/stripe/api.py", line 4, in post\n'
    assert own_frames(lib, ()) == ("api.py:post",)


def test_only_the_last_traceback_block_counts() -> None:
    chained = (
        'Traceback (most recent call last):\n  File "/app/a.py", line 1, in first\nKeyError: x\n\n'
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "/app/b.py", line 9, in second\nValueError: y\n'
    )
    assert own_frames(chained, ()) == ("b.py:second",)


def test_record_counts_and_reopens() -> None:
    fp = fingerprint("E", "m", None)
    hits = [SignatureHit("t", fp, JobId(f"j{i}"), "task", 100.0 + i) for i in range(12)]
    s = None
    for h in hits:
        s = record(s, h)
    assert s is not None
    assert (s.occurrences, s.first_seen, s.last_seen, len(s.sample_job_ids)) == (12, 100.0, 111.0, 10)
    from dataclasses import replace

    resolved = replace(s, status=SignatureStatus.RESOLVED)
    assert record(resolved, hits[0]).status is SignatureStatus.ACTIVE
    suppressed = replace(s, status=SignatureStatus.SUPPRESSED)
    assert record(suppressed, hits[0]).status is SignatureStatus.SUPPRESSED
