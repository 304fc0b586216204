"""`Database`: the async engine, sessions, commit hooks and the in-process conversation locks."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from ctxpress.app.server.db.liveness import CheckoutLiveness
from ctxpress.app.server.db.sqlite_connection import connect_in_loop
from ctxpress.app.server.db.sqlite_writers import SqliteWriterTurns
from ctxpress.app.server.settings import CONNECTION_POOL_SIZE, Backend, DatabaseTarget

_DATABASE_KEY = "ctxpress_database"
_AFTER_COMMIT_KEY = "ctxpress_after_commit"
SQLITE_BUSY_TIMEOUT_SECONDS = 30


class _ServiceSession(Session):
    """The sync session class behind every `AsyncSession` of the service (carries the commit hooks)."""


@event.listens_for(_ServiceSession, "after_commit")
def _run_after_commit_callbacks(session: Session) -> None:
    for callback in session.info.pop(_AFTER_COMMIT_KEY, []):
        callback()


@event.listens_for(_ServiceSession, "after_rollback")
def _drop_after_commit_callbacks(session: Session) -> None:
    session.info.pop(_AFTER_COMMIT_KEY, None)


def call_after_commit(session: AsyncSession, callback: Callable[[], None]) -> None:
    """Run `callback` once the session's current transaction commits (never if it rolls back).

    Used to wake SSE listeners exactly when the events they will read are visible.
    """
    session.info.setdefault(_AFTER_COMMIT_KEY, []).append(callback)


class KeyedLocks:
    """One `asyncio.Lock` per key, created on demand and dropped when nobody holds or awaits it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def get(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock


class Database:
    def __init__(self, target: DatabaseTarget, *, pool_size: int = CONNECTION_POOL_SIZE) -> None:
        self.target = target
        self.engine: AsyncEngine = _create_engine(target, pool_size)
        self.sessions = async_sessionmaker(
            self.engine,
            expire_on_commit=False,
            sync_session_class=_ServiceSession,
            info={_DATABASE_KEY: self},
        )
        #: SQLite only: the conversation lock (PostgreSQL uses the row lock instead).
        self.local_conversation_locks = KeyedLocks()

    @property
    def backend(self) -> Backend:
        return self.target.backend

    def session(self) -> AsyncSession:
        return self.sessions()

    @staticmethod
    def of(session: AsyncSession) -> Database:
        database = session.info.get(_DATABASE_KEY)
        if not isinstance(database, Database):
            raise TypeError("this session was not created by ctxpress.app.server.db.Database.session()")
        return database

    async def dispose(self) -> None:
        await self.engine.dispose()


def _create_engine(target: DatabaseTarget, pool_size: int) -> AsyncEngine:
    if target.backend == "sqlite":
        # Statements run on the event loop's thread, waits for a lock on the connection's own
        # (`sqlite_connection.py`).
        engine = create_async_engine(
            target.sqlalchemy_url,
            async_creator=partial(
                connect_in_loop,
                str(target.sqlalchemy_url.database),
                busy_timeout_seconds=SQLITE_BUSY_TIMEOUT_SECONDS,
            ),
            pool_size=pool_size,
            max_overflow=0,
        )
        event.listen(engine.sync_engine, "connect", _configure_sqlite_connection)
        SqliteWriterTurns(SQLITE_BUSY_TIMEOUT_SECONDS).install(engine)
        return engine
    engine = create_async_engine(
        target.sqlalchemy_url,
        pool_size=pool_size,
        max_overflow=0,
        # No server-side prepared statements: psycopg forgets them on every ROLLBACK (each read-only
        # session ends with one) and sends `DEALLOCATE ALL` before the next statement -- a round
        # trip and a server transaction of its own, about one every third turn, for statements
        # prepared again after their next five runs.
        connect_args={"prepare_threshold": None},
    )
    CheckoutLiveness().install(engine)  # pings a connection only when it may have died (liveness.py)
    return engine


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # WAL: readers never block the writer, so SSE replays and state reads run beside a run.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()
