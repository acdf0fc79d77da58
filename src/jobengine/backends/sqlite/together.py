"""Group commit on SQLite: writes that arrive while the store thread commits share the next transaction.

A durable commit (``synchronous=FULL``) costs an fsync, and the store has one write thread, so concurrent
enqueues would each wait for their own fsync in turn. :class:`Together` queues them instead: while one
group commits, the writes that arrive wait together, and the next group runs them in one ``BEGIN IMMEDIATE``
... ``COMMIT``, each under a ``SAVEPOINT`` of its own. Failure policy:

- a write that raises is rolled back to its savepoint and its caller gets its error (translated as
  :meth:`SqliteStore._call` does); the others in the group commit;
- a failed ``BEGIN`` or ``COMMIT`` fails every write of the group (none of them is stored);
- a caller that is cancelled while its group runs changes nothing: its write commits with the group (as a
  write whose caller went away does on the store thread anyway).

A write that finds no group in flight and none waiting is a group of one, run by its caller without a task
to lead it (a sequential caller's every write): cancelled before the store thread takes it, it is not made,
as a lone :meth:`SqliteStore._write` is not. Writes that arrive while it runs wait for the next group.

Every caller returns only after its group's commit, at the store's ``synchronous``: durability is a lone
write's. A group of one has no savepoint.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .connection import translate

T = TypeVar("T")

Write = Callable[[sqlite3.Connection], Any]
#: Runs a function in one write transaction on the store thread (SqliteStore._write).
RunWrite = Callable[[Callable[[sqlite3.Connection], list[tuple[bool, Any]]]], Awaitable[list[tuple[bool, Any]]]]


def _each(conn: sqlite3.Connection, writes: list[Write]) -> list[tuple[bool, Any]]:
    """In the group's transaction: each write under its own savepoint; (True, result) or (False, error)."""
    if len(writes) == 1:
        return [(True, writes[0](conn))]  # an error fails the transaction, and so the one caller
    out: list[tuple[bool, Any]] = []
    for fn in writes:
        conn.execute("SAVEPOINT together")
        try:
            result = fn(conn)
        except Exception as exc:
            if not conn.in_transaction:  # SQLite rolled the whole transaction back: nothing is left to save
                raise
            # A rollback that fails leaves the transaction unusable: the whole group fails with that error.
            conn.execute("ROLLBACK TO together")
            conn.execute("RELEASE together")
            out.append((False, translate(exc) if isinstance(exc, sqlite3.Error) else exc))
            continue
        conn.execute("RELEASE together")
        out.append((True, result))
    return out


class Together:
    """The queue of writes waiting for the next group; used on one event loop (the store's callers')."""

    def __init__(self, run: RunWrite) -> None:
        self._run = run
        self._waiting: list[tuple[Write, asyncio.Future[Any]]] = []
        self._leader: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._alone = False  # a caller runs its write as a group of one

    def usable(self) -> bool:
        """Whether the caller may queue here: the groups run on the loop of the first caller."""
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop.is_closed():
            # A closed loop runs nothing again: what it left here is forgotten with it.
            self._loop, self._leader, self._waiting, self._alone = loop, None, [], False
        return loop is self._loop

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if not self._alone and not self._waiting and (self._leader is None or self._leader.done()):
            # Nothing in flight: this write is a group of one, run by its caller (no task to lead it).
            # What arrives meanwhile waits for the leader this call starts when it ends.
            self._alone = True
            try:
                outcomes = await self._run(functools.partial(_each, writes=[fn]))
            finally:
                self._alone = False
                self._follow()
            result: T = outcomes[0][1]
            return result
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((fn, future))
        self._follow()
        return await asyncio.shield(future)

    def _follow(self) -> None:
        """Start a leader for the writes waiting, unless a group is in flight (it starts one when it ends)."""
        if self._waiting and not self._alone and (self._leader is None or self._leader.done()):
            self._leader = asyncio.get_running_loop().create_task(self._lead(), name="jobengine-sqlite-together")

    async def _lead(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting, []
            try:
                outcomes = await self._run(functools.partial(_each, writes=[fn for fn, _ in group]))
            except Exception as exc:
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc)
                continue
            except BaseException:
                for _, future in group + self._waiting:
                    future.cancel()
                self._waiting = []
                raise
            for (_, future), (ok, value) in zip(group, outcomes, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
