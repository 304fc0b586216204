"""SQLite connections that run their statements on the event loop's thread.

aiosqlite runs every call of a connection -- open a cursor, execute, fetch, close -- on a thread of
the connection's own and hands each result back to the event loop: a queue, a thread wake-up and a
loop wake-up per call, about four per statement. SQLite answers the service's statements (indexed,
bounded reads and small writes, from the page cache) in microseconds, far less than those
hand-offs when the loop has nothing else to do: accepting one message at a time cost 4.9-5.5 ms
of the process's CPU with them and 3.1-4.0 ms without (`bench/intake_burst.py --one-by-one`). Under
load, with the loop awake anyway, a hand-off costs less, and the CPU per turn of the
50-conversation load barely moved (docs/benchmarks.md).

`LoopSqliteConnection` is an aiosqlite connection that runs its calls in place. What may wait
still runs on the connection's thread:

- a call that meets another connection's lock (`SQLITE_BUSY`, say the CLI writing to the same file):
  in place it runs with no busy timeout, so SQLite answers at once; it then runs again on the thread
  with the busy timeout, where SQLite's sleeps block nothing else -- what aiosqlite does from the
  start. A call refused with `SQLITE_BUSY` changed nothing, so running it again is the same call;
- a commit (the write that may checkpoint the write-ahead log and sync the file), a script
  (maintenance: `incremental_vacuum`, `wal_checkpoint`), closing the connection (the last one to
  close checkpoints the log). Closing a cursor, though its call is also named `close`, only
  finalises a statement and runs in place: sent to the thread, with the busy timeout set and
  cleared around it, it cost a burst of 50 messages 5.8 ms of the process's CPU per message
  instead of 4.0 (about nine cursors per message).

Statements in place never wait, so a task that runs several in a row keeps the loop until it
awaits something else; letting other tasks in after each statement (`asyncio.sleep(0)`, as the
hand-off to the thread used to) was tried and not kept: the streams that clients open right after
`POST …/runs` then waited behind every run's statements and opened about 1.2 s after their `POST`
instead of 0.3 s (`bench/streaming_load.py`, docs/benchmarks.md).

The busy timeout is a statement (`PRAGMA busy_timeout`), so it changes only when a call needs it:
in write-ahead-log mode a commit holds the write lock already (taken by the transaction's first
write), so it is tried with the timeout the statements left, zero, and set to wait only when SQLite
refuses it with `SQLITE_BUSY` (a rollback-journal file whose readers block the commit). SQLite keeps
the transaction open after such a refusal, so trying again commits the same transaction. Setting
the timeout before every commit and clearing it after cost two statements per transaction.

One task uses a connection at a time (the pool hands it to one session; the checkpointer holds its
lock), and it waits for each call, so the loop's thread and the connection's never use the sqlite3
connection at once: it is opened with `check_same_thread=False`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeVar

import aiosqlite

__all__ = ["LoopSqliteConnection", "connect_in_loop"]

#: SQLite's primary result code for "the database file is locked" (extended codes keep it in the low byte).
SQLITE_BUSY: Final = 5
#: aiosqlite's rows per fetch of an async iteration (its own default).
_ITER_CHUNK_SIZE: Final = 64
#: The sqlite3 calls (of a connection or a cursor) that always run on the connection's thread.
_ON_THE_THREAD: Final = frozenset({"commit", "executescript"})
#: ... and the calls of the connection itself (not of a cursor: closing a cursor only finalises
#: its statement) that do.
_CONNECTION_ON_THE_THREAD: Final = frozenset({"close"})
#: Of those, the ones tried with the timeout as it is (zero, after statements in place) before the
#: busy timeout is set for them: a commit usually holds every lock it needs (module docstring).
_TRIED_WITHOUT_WAITING: Final = frozenset({"commit"})

_Result = TypeVar("_Result")


def _is_busy(error: BaseException) -> bool:
    """Whether `error` is SQLite's `SQLITE_BUSY` (or one of its extended codes)."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(error, sqlite3.OperationalError) and code is not None and code & 0xFF == SQLITE_BUSY


def _runs_on_the_thread(fn: Callable[..., Any], name: str | None) -> bool:
    """Whether the sqlite3 call `fn` (named `name`) always runs on the connection's thread."""
    if name in _ON_THE_THREAD:
        return True
    return name in _CONNECTION_ON_THE_THREAD and isinstance(getattr(fn, "__self__", None), sqlite3.Connection)


class LoopSqliteConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls run on the caller's thread, except those that may wait
    (module docstring). Use `connect_in_loop` to open one."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], *, busy_timeout_seconds: float) -> None:
        super().__init__(connector, _ITER_CHUNK_SIZE)
        #: How long a call on the connection's thread waits for a lock.
        self.busy_timeout_seconds = busy_timeout_seconds
        #: The sqlite3 connection's busy timeout now (it opens with none).
        self._busy_timeout = 0.0

    async def _execute(self, fn: Callable[..., _Result], *args: Any, **kwargs: Any) -> _Result:
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        name = getattr(fn, "__name__", None)
        if not _runs_on_the_thread(fn, name):
            self._use_busy_timeout(0.0)
            try:
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    raise
        return await self._on_the_thread(partial(fn, *args, **kwargs), name in _TRIED_WITHOUT_WAITING)

    async def _on_the_thread(self, call: Callable[[], _Result], try_first: bool = False) -> _Result:
        """`call` on the connection's thread, with the busy timeout (`try_first`: once with the
        timeout as it is, and again with the busy timeout only if SQLite refuses it as busy)."""

        def with_busy_timeout() -> _Result:
            if try_first:
                try:
                    return call()
                except sqlite3.OperationalError as error:
                    if not _is_busy(error):
                        raise
            self._use_busy_timeout(self.busy_timeout_seconds)
            return call()

        return await super()._execute(with_busy_timeout)

    def _use_busy_timeout(self, seconds: float) -> None:
        """Set the busy timeout when it differs (a statement, so only on a change of side)."""
        if self._busy_timeout != seconds:
            self._conn.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}").close()
            self._busy_timeout = seconds


def connect_in_loop(path: str, *, busy_timeout_seconds: float) -> LoopSqliteConnection:
    """A `LoopSqliteConnection` to `path`, opened when awaited or entered (`async with`), as
    `aiosqlite.connect` does: SQLAlchemy's `async_creator`, the checkpointer's connection."""
    connector = partial(sqlite3.connect, path, timeout=0, check_same_thread=False)
    return LoopSqliteConnection(connector, busy_timeout_seconds=busy_timeout_seconds)
