"""Actions on many jobs at once (cancel, retry, replay, delete), chosen by ids or by a filter, and what
each action takes. Pure: the engine's :class:`~jobengine.engine.selection.JobSelection` applies them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from jobengine.core.ids import JobId
from jobengine.core.models import Job
from jobengine.core.states import JobState
from jobengine.errors import InvalidJob

#: The most jobs one bulk action takes; a filter that matches more acts on the newest and says so.
MAX_BULK = 10_000
#: Jobs changed per store call: one transaction each, so a bulk action is a bounded number of statements.
BULK_CHUNK = 500
#: Refused ids reported by id (the count covers them all).
REFUSED_SHOWN = 100
#: The shortest prefix an id lookup takes (a whole id of any length always does): eight hex digits of a
#: UUIDv7 are about a minute of ids.
MIN_PREFIX = 8


class BulkAction(StrEnum):
    CANCEL = "cancel"
    RETRY = "retry"
    REPLAY = "replay"
    DELETE = "delete"

    @classmethod
    def parse(cls, value: str) -> BulkAction:
        """The action named ``value``, else InvalidJob naming ``action``."""
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(a.value for a in cls)
            raise InvalidJob("action", f"{value!r} is not an action (one of {known})") from None


def refusal(action: BulkAction, job: Job) -> str | None:
    """Why ``action`` does not apply to ``job`` now, or None when it does (the rules of the single-job
    actions: cancel a job that has not ended; retry a dead, cancelled or failed one; replay or delete a
    dead one)."""
    state = job.state
    if action is BulkAction.CANCEL:
        return f"already {state.value}" if job.terminal else None
    if action is BulkAction.RETRY:
        ok = state in (JobState.DEAD, JobState.CANCELLED, JobState.FAILED)
        return None if ok else f"{state.value}; only dead, cancelled or failed jobs can be retried"
    done = "replayed" if action is BulkAction.REPLAY else "deleted"
    return None if state is JobState.DEAD else f"{state.value}; only dead jobs can be {done}"


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk action did: ``matched`` jobs were looked at, ``changed`` ids were changed, ``refused``
    (at most REFUSED_SHOWN, ``refused_count`` in all) were left as they are with the reason; ``more``:
    the filter matches more than MAX_BULK jobs (run it again for the rest)."""

    action: BulkAction
    matched: int
    changed: list[JobId] = field(default_factory=list)
    refused: list[tuple[JobId, str]] = field(default_factory=list)
    refused_count: int = 0
    more: bool = False
