"""What a repository of :mod:`jobengine.backends.sql` runs on: a transaction, a dialect and a runner.

Statements are written with ``?`` placeholders and ``{s}`` before each table name; the transaction puts in
the backend's placeholders and schema. Both transactions are async, so a repository's operation is one
coroutine whatever the backend: on SQLite the coroutine never suspends (every call is a blocking sqlite3
call on the store thread), so :func:`drive` runs it there to the end in one step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from jobengine.core import codec
from jobengine.core.ids import JobId
from jobengine.core.models import Changed, Completion, Event, Inserted, Job, NewEvent, NewJob

T = TypeVar("T")
Row = Sequence[Any]


# What a statement's marks become: ``{json}`` a parameter holding JSON text, ``{text}`` after a JSON column
# read as text, ``{instr}`` the position of a substring (1-based, 0 when absent), ``{true}`` a boolean
# column's true (as SQLite's partial indexes spell it), ``{same}`` equality that holds for two NULLs too,
# ``{lock}`` the row lock of a read-then-write and ``{skip_locked}`` that of a queue's pick (several
# processes take disjoint rows). SQLite needs no row lock: its write transaction holds the whole file.
# ``{in_array}`` tests membership in one parameter of :meth:`Dialect.array`; ``{runnable}`` is a job a worker
# may claim, spelled on SQLite as its partial index ``jobs_claim`` is (the planner uses it only then);
# ``{deps}`` the table of dependency edges; ``{bytes}`` after a text column compares it byte by byte, as an
# id range needs (PostgreSQL's columns may carry another collation; SQLite compares bytes already).
_MARKS: Final = {
    False: {"{json}": "?", "{text}": "", "{instr}": "instr", "{true}": "1", "{same}": "IS", "{lock}": "",
            "{skip_locked}": "", "{in_array}": "IN (SELECT value FROM json_each(?))",
            "{runnable}": "(state = 'queued' OR state = 'scheduled' OR state = 'failed')", "{deps}": "job_deps",
            "{bytes}": ""},
    True: {"{json}": "?::jsonb", "{text}": "::text", "{instr}": "strpos", "{true}": "TRUE",
           "{same}": "IS NOT DISTINCT FROM", "{lock}": " FOR UPDATE", "{skip_locked}": " FOR UPDATE SKIP LOCKED",
           "{in_array}": "= ANY(?::text[])", "{runnable}": "state IN ('queued', 'scheduled', 'failed')",
           "{deps}": "job_dependencies", "{bytes}": ' COLLATE "C"'},
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the two databases spell differently, for the statements of a repository: ``prefix`` goes
    before each table name (``{s}``), the other marks are in :data:`_MARKS`. ``native``: PostgreSQL, which
    stores arrays and JSON natively (``text[]``, ``jsonb``) where SQLite stores JSON text."""

    prefix: str = ""
    native: bool = False

    def q(self, sql: str) -> str:
        for mark, text in _MARKS[self.native].items():
            sql = sql.replace(mark, text)
        return sql.replace("{s}", self.prefix)

    def array(self, values: Iterable[str]) -> Any:
        """A value for a text-array column."""
        return list(values) if self.native else codec.dumps(list(values))

    def strings(self, value: Any) -> tuple[str, ...]:
        """A text-array column's value as read."""
        return tuple(value) if self.native else tuple(codec.loads(value))

    def loads(self, value: Any) -> Any:
        """A JSON column's value as read (``jsonb`` arrives decoded)."""
        return value if self.native else codec.loads(value)


class Tx(Protocol):
    """One open transaction (or, for reads, one connection), and the two writes whose SQL stays with each
    backend (a job insert, an event append), for operations that must commit with them."""

    d: Dialect

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    async def run(self, sql: str, params: Sequence[Any] = (), *, duplicate: Exception | None = None) -> int:
        """Execute; the number of rows changed. ``duplicate``: raised instead when a key is taken."""
        ...

    async def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    async def jobs(self, where: str, params: Sequence[Any] = ()) -> list[Job]:
        """The jobs of ``SELECT ... FROM {s}jobs jobs WHERE <where>`` (which may go on with ORDER BY, LIMIT)."""
        ...

    async def events(self, events: Sequence[NewEvent], now: float) -> list[Event]:
        """Append ``events`` in order, numbered."""
        ...

    async def insert_jobs(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        """The store's own insert, inside this transaction."""
        ...

    async def complete_jobs(self, completions: Sequence[Completion], now: float) -> Changed:
        """The store's own completion (fenced, dependents released, graphs settled), inside this transaction."""
        ...

    async def retry_jobs(self, ids: Sequence[JobId], now: float) -> Changed:
        """The store's own retry (dead, cancelled and failed jobs queued again now), inside this transaction."""
        ...

    async def add_edges(self, edges: Sequence[tuple[JobId, JobId]]) -> None:
        """Each (child, parent): ``child``, not started yet, also waits for ``parent``."""
        ...


class Db(Protocol):
    """A backend's way to run a repository's operations."""

    async def read(self, fn: Callable[[Tx], Awaitable[T]]) -> T: ...

    async def write(self, fn: Callable[[Tx], Awaitable[T]], *, retry: bool = True, hot: bool = False) -> T:
        """``fn`` in one write transaction. ``retry``: it may run again after a lost connection (PostgreSQL),
        which only an idempotent operation may. ``hot``: a worker's or dispatcher's own bookkeeping, which
        SQLite commits at ``worker_synchronous`` (a power loss may roll it back; it is then done again)."""
        ...


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (an operation on a SQLite :class:`Tx`)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("an operation on a blocking transaction suspended")


def unique(items: Iterable[T], key: Callable[[T], object]) -> list[T]:
    """The first item of each key, in order: a batch that names a job twice changes it once (its first entry)."""
    seen: dict[object, T] = {}
    for item in items:
        seen.setdefault(key(item), item)
    return list(seen.values())


def marks(n: int) -> str:
    return ", ".join("?" * n)


def conditions(*terms: tuple[str, Any], base: str = "1 = 1") -> tuple[str, list[Any]]:
    """A WHERE clause: ``base`` and each term whose value is not None (``("tenant = ?", tenant)``), and the
    values of those terms."""
    given = [(term, value) for term, value in terms if value is not None]
    return " AND ".join([base, *(term for term, _ in given)]), [value for _, value in given]


class HasDb(Protocol):
    """A store as the shared repositories mixed into it see it."""

    @property
    def db(self) -> Db: ...
