"""The diff of a simulate run against the last full run of the same task and input source: per item, whether
its result is the same, changed, new (only the simulate run has it) or gone (only the full run has it), with
both results side by side. Pure: computed from the two runs' segment jobs (their items and results) when
asked, so every store serves it without keeping anything apart.

A segment job's result is read per item this way: a list as long as the job's items is one result per item,
in order; an object with a key for each item (a string item is its own key, any other item its canonical
JSON) is keyed by item; any other result is the result of every item of the segment. Usage::

    diff = await engine.runs.diff(simulate_run.id)
    for entry in diff.entries:
        if entry.change is ItemChange.CHANGED:
            print(entry.item, entry.before, "->", entry.after)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from jobengine.core import codec
from jobengine.core.models import Job, Json
from jobengine.core.run_requests import item_key

#: An item's canonical text, mapped to the item and its result.
ItemResults = Mapping[str, tuple[Json, Json]]


class ItemChange(StrEnum):
    """How an item's result in a simulate run compares with the last full run's."""

    SAME = "same"
    CHANGED = "changed"
    NEW = "new"  # only the simulate run did the item
    GONE = "gone"  # only the full run did the item


@dataclass(frozen=True, slots=True)
class DiffEntry:
    """One item: its ``change``, its result in the full run (``before``) and in the simulate run (``after``)."""

    item: Json
    change: ItemChange
    before: Json = None
    after: Json = None

    def to_json(self) -> dict[str, Json]:
        return {"item": self.item, "change": self.change.value, "before": self.before, "after": self.after}


@dataclass(frozen=True, slots=True)
class RunDiff:
    """A simulate run (``run_id``) against the full run it is compared with (``base_run_id``; None when the
    stream has no completed full run, so every item is new). ``entries`` are in item order; ``unfinished``
    counts the simulate run's items whose segment did not succeed (left out of the entries)."""

    run_id: str
    base_run_id: str | None
    entries: tuple[DiffEntry, ...]
    unfinished: int = 0

    @property
    def counts(self) -> dict[str, int]:
        """How many items each change has (every change named, zero included)."""
        counts = dict.fromkeys((c.value for c in ItemChange), 0)
        for entry in self.entries:
            counts[entry.change.value] += 1
        return counts

    def to_json(self, *, same: bool = False) -> dict[str, Json]:
        """The diff as the API answers it; the entries of unchanged items only with ``same``."""
        return {
            "run_id": self.run_id, "base_run_id": self.base_run_id, "counts": dict(self.counts),
            "unfinished": self.unfinished,
            "entries": [e.to_json() for e in self.entries if same or e.change is not ItemChange.SAME],
        }  # fmt: skip


def _key(item: Json) -> str:
    return item if isinstance(item, str) else codec.dumps(item, "items")


def item_results(jobs: Iterable[Job]) -> ItemResults:
    """The result of each item of ``jobs`` (segment jobs that succeeded), read as the module says."""
    found: dict[str, tuple[Json, Json]] = {}
    for job in jobs:
        items = job.payload.get("items") if isinstance(job.payload, dict) else None
        if not isinstance(items, list):
            continue
        result = job.result
        keys = [_key(i) for i in items]
        for n, item in enumerate(items):
            if isinstance(result, list) and len(result) == len(items):
                value = result[n]
            elif isinstance(result, dict) and all(k in result for k in keys):
                value = result[keys[n]]
            else:
                value = result
            found[codec.dumps(item, "items")] = (item, value)
    return found


def diff_results(before: ItemResults, after: ItemResults) -> tuple[DiffEntry, ...]:
    """Per item of either side, in item order: same / changed / new / gone (results compared as canonical JSON)."""
    entries = []
    for key in before.keys() | after.keys():
        if key not in before:
            item, result = after[key]
            entries.append(DiffEntry(item, ItemChange.NEW, None, result))
        elif key not in after:
            item, result = before[key]
            entries.append(DiffEntry(item, ItemChange.GONE, result, None))
        else:
            item, old = before[key]
            new = after[key][1]
            same = codec.dumps(old, "result") == codec.dumps(new, "result")
            entries.append(DiffEntry(item, ItemChange.SAME if same else ItemChange.CHANGED, old, new))
    return tuple(sorted(entries, key=lambda e: item_key(e.item)))
