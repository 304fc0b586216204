"""SQLite write transactions of one process take turns in the process, not in SQLite's lock.

SQLite lets one connection write at a time. A connection that finds the database locked runs the
busy handler, which sleeps and tries again (1, 2, 5, … up to 100 ms per sleep): under load a
pooled connection whose first write meets another transaction's lock waits in those sleeps, long
after the lock is free. In the 100 turns of `bench/service_load.py`'s 50-conversation load, 170
statements waited 20 ms or more that way (91 of them 100 ms or more), each the first write of an
intake, a step's store or a pressure record.

Here the first write of a transaction waits for this process's writer turn (handed to the next
waiter the moment it is released), and the turn ends when the connection goes
back to the pool -- after its commit or rollback, which a session does as its transaction ends (a
`commit` event would come before the commit itself). Reads never wait (WAL). A wait longer than
SQLite's own busy timeout fails as SQLite would ("database is locked"). Other processes on the
same file (the CLI) still meet SQLite's own lock and its busy timeout.

Two lines wait for the turn: a transaction begun under `writes_first()` -- a message being accepted
-- is served before the others (a run's step stores and its finish), each line in arrival order.
In the 50-conversation load the second message of each conversation arrived while 16 runs were
writing, and waited behind their transactions: its first event came 330 ms (p50) after its `POST`
on SQLite against 78 ms on PostgreSQL, where transactions do not take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import deque
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Final

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_only

#: Statements that take SQLite's write lock (the service's own; DDL runs only in migrations).
_WRITES: Final = ("INSERT", "UPDATE", "DELETE", "REPLACE")


#: Whether the current task's write transactions wait in the first line (`writes_first`).
_WRITES_FIRST: Final[ContextVar[bool]] = ContextVar("ctxpress_sqlite_writes_first", default=False)


def is_write(statement: str) -> bool:
    return statement.lstrip()[:7].upper().startswith(_WRITES)


@contextlib.contextmanager
def writes_first() -> Iterator[None]:
    """The write transactions begun inside this block (in this task) take the writer turn before
    the ones waiting in the other line."""
    token = _WRITES_FIRST.set(True)
    try:
        yield
    finally:
        _WRITES_FIRST.reset(token)


class _Turnstile:
    """One holder at a time; waiters in two lines, the first line served first, each in arrival order."""

    def __init__(self) -> None:
        self._held = False
        self._lines: tuple[deque[asyncio.Future[None]], deque[asyncio.Future[None]]] = (deque(), deque())

    async def acquire(self, *, first_line: bool) -> None:
        if not self._held and not self._lines[0] and not self._lines[1]:
            self._held = True
            return
        line = self._lines[0 if first_line else 1]
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.append(granted)
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                self.release()  # handed over just as the wait ended: pass it on
            else:
                with contextlib.suppress(ValueError):  # `release` may have dropped it already
                    line.remove(granted)
            raise

    def release(self) -> None:
        for line in self._lines:
            while line:
                waiter = line.popleft()
                if not waiter.done():  # a cancelled wait is skipped
                    waiter.set_result(None)  # the turn passes straight to it
                    return
        self._held = False


class SqliteWriterTurns:
    """One writer at a time per process, in arrival order within each line (`writes_first`); owned by
    the service's SQLite engine."""

    def __init__(self, timeout_seconds: float) -> None:
        self.timeout_seconds = timeout_seconds
        self._turnstile = _Turnstile()
        #: The DBAPI connection whose transaction holds the turn (None: nobody).
        self._holder: Any = None

    def install(self, engine: AsyncEngine) -> None:
        sync_engine = engine.sync_engine
        event.listen(sync_engine, "before_cursor_execute", self._before_execute)
        event.listen(sync_engine.pool, "checkin", self._connection_returned)
        event.listen(sync_engine.pool, "invalidate", self._connection_returned)

    def _before_execute(self, connection: Connection, _cursor: Any, statement: str, *_args: Any) -> None:
        dbapi_connection = connection.connection.dbapi_connection
        if self._holder is dbapi_connection or not is_write(statement):
            return
        # Runs inside SQLAlchemy's greenlet of an async call: wait for the turn without blocking
        # the event loop.
        try:
            await_only(self._take_turn())
        except TimeoutError:
            raise sqlite3.OperationalError(
                f"database is locked (no write turn within {self.timeout_seconds:g} s)"
            ) from None
        self._holder = dbapi_connection

    async def _take_turn(self) -> None:
        # Not `wait_for`: on Python 3.11 it drops a cancellation that arrives as the lock is granted.
        async with asyncio.timeout(self.timeout_seconds):
            await self._turnstile.acquire(first_line=_WRITES_FIRST.get())

    def _connection_returned(self, dbapi_connection: Any, *_args: Any) -> None:
        if dbapi_connection is not None and self._holder is dbapi_connection:
            self._holder = None
            self._turnstile.release()
