"""SQLite statements run on the event loop's thread; what may wait runs on the connection's own
(`db/sqlite_connection.py`, issue 17: time to first event).

SQLite only: the class is the SQLite driver's; PostgreSQL's driver (psycopg) is asyncio-native.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.sqlite_connection import LoopSqliteConnection, connect_in_loop
from ctxpress.app.server.settings import resolve_database_url


@pytest.fixture
async def connection(tmp_path: Path) -> AsyncIterator[LoopSqliteConnection]:
    async with connect_in_loop(str(tmp_path / "c.db"), busy_timeout_seconds=5) as connection:
        await connection.execute("PRAGMA journal_mode=WAL")
        await connection.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, who TEXT)")
        await connection.commit()
        yield connection


def _traced(connection: LoopSqliteConnection) -> list[tuple[str, int]]:
    """Each SQL statement SQLite runs on `connection`, with the thread that ran it."""
    seen: list[tuple[str, int]] = []
    connection._conn.set_trace_callback(lambda sql: seen.append((sql, threading.get_ident())))
    return seen


async def test_statements_run_on_the_loops_thread_and_commits_on_the_connections(
    connection: LoopSqliteConnection,
) -> None:
    seen = _traced(connection)
    loop_thread = threading.get_ident()
    await connection.execute("INSERT INTO log (who) VALUES ('a')")
    async with connection.execute("SELECT who FROM log") as cursor:
        assert [row[0] async for row in cursor] == ["a"]
    await connection.commit()
    threads = {sql.split()[0]: thread for sql, thread in seen}
    assert threads["INSERT"] == loop_thread and threads["SELECT"] == loop_thread
    # The commit, which may checkpoint the log and sync the file, is the connection's thread's work.
    assert threads["COMMIT"] != loop_thread


async def test_a_statement_and_its_cursor_need_nothing_from_the_connections_thread(
    connection: LoopSqliteConnection,
) -> None:
    """Executing, fetching and closing the cursor all run in place: while the connection's thread
    is busy (here: held on purpose), a read completes (closing a cursor is not closing the
    connection, which does wait for the thread)."""
    release = threading.Event()
    holding = asyncio.ensure_future(aiosqlite.Connection._execute(connection, release.wait, 10))
    try:
        await asyncio.sleep(0.05)
        assert not holding.done(), "the connection's thread is held"

        async def read() -> list[str]:
            async with connection.execute("SELECT who FROM log") as cursor:
                return [row[0] async for row in cursor]

        assert await asyncio.wait_for(read(), timeout=2) == []
    finally:
        release.set()
        await holding


async def test_a_write_that_meets_another_connections_lock_waits_off_the_loop(
    tmp_path: Path, connection: LoopSqliteConnection
) -> None:
    """Another process's writer (here another connection) holds the lock: the write waits for it on
    the connection's thread, the event loop goes on meanwhile, and the write lands once it is free."""
    other = sqlite3.connect(tmp_path / "c.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO log (who) VALUES ('other')")
    seen = _traced(connection)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, other.execute, "COMMIT")
    await connection.execute("INSERT INTO log (who) VALUES ('mine')")
    await connection.commit()
    ticking.cancel()
    other.close()
    assert ticks >= 10, "the event loop went on while the write waited for the lock"
    inserts = [thread for sql, thread in seen if sql.startswith("INSERT")]
    # Tried on the loop's thread (refused at once), then waited for on the connection's.
    assert inserts[0] == threading.get_ident() and inserts[-1] != threading.get_ident()
    async with connection.execute("SELECT who FROM log ORDER BY id") as cursor:
        assert [row[0] async for row in cursor] == ["other", "mine"]


async def test_a_transaction_sets_no_busy_timeout_when_nothing_waits(
    connection: LoopSqliteConnection,
) -> None:
    """In write-ahead-log mode a commit holds its locks already: no `PRAGMA busy_timeout` is run
    around it (two statements per transaction when it was set before each commit)."""
    seen = _traced(connection)
    for who in ("a", "b"):
        await connection.execute("INSERT INTO log (who) VALUES (?)", (who,))
        await connection.commit()
    statements = [sql.split()[0] for sql, _ in seen]
    assert statements == ["BEGIN", "INSERT", "COMMIT", "BEGIN", "INSERT", "COMMIT"]


async def test_a_commit_refused_as_busy_waits_for_the_lock_off_the_loop(tmp_path: Path) -> None:
    """A rollback-journal file: another connection's read blocks the commit, which SQLite refuses
    with `SQLITE_BUSY` and keeps open; it is committed again with the busy timeout, on the
    connection's thread, once the reader is done."""
    async with connect_in_loop(str(tmp_path / "j.db"), busy_timeout_seconds=5) as connection:
        await connection.execute("CREATE TABLE log (who TEXT)")
        await connection.commit()
        reader = sqlite3.connect(tmp_path / "j.db", isolation_level=None, check_same_thread=False)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM log").fetchone() == (0,)  # holds a shared lock
        seen = _traced(connection)
        await connection.execute("INSERT INTO log VALUES ('mine')")
        asyncio.get_running_loop().call_later(0.3, reader.execute, "COMMIT")
        await connection.commit()
        reader.close()
        commits = [sql for sql, _ in seen if sql.startswith(("COMMIT", "PRAGMA"))]
        assert commits == ["COMMIT", "PRAGMA busy_timeout=5000", "COMMIT"]
        check = sqlite3.connect(tmp_path / "j.db")
        assert check.execute("SELECT who FROM log").fetchall() == [("mine",)]
        check.close()


async def test_a_lock_held_past_the_busy_timeout_fails_as_sqlite_would(tmp_path: Path) -> None:
    async with connect_in_loop(str(tmp_path / "t.db"), busy_timeout_seconds=0.2) as connection:
        await connection.execute("CREATE TABLE log (who TEXT)")
        await connection.commit()
        other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                await connection.execute("INSERT INTO log VALUES ('mine')")
        finally:
            other.execute("ROLLBACK")
            other.close()
        # The connection is usable afterwards, its busy timeout back to zero for calls in place.
        await connection.execute("INSERT INTO log VALUES ('later')")
        await connection.commit()
        async with connection.execute("PRAGMA busy_timeout") as cursor:
            assert (await cursor.fetchone()) == (0,)


async def test_the_services_sqlite_sessions_use_it(tmp_path: Path) -> None:
    database = Database(resolve_database_url(f"sqlite:///{tmp_path / 's.db'}"))
    try:
        async with database.session() as session:
            connection = await session.connection()
            raw = await connection.get_raw_connection()
            assert isinstance(raw.driver_connection, LoopSqliteConnection)
            seen = _traced(raw.driver_connection)
            await session.execute(text("SELECT 1"))
            assert [thread for sql, thread in seen if sql == "SELECT 1"] == [threading.get_ident()]
            # Errors reach SQLAlchemy as they did through aiosqlite's thread.
            with pytest.raises(OperationalError, match="no such table"):
                await session.execute(text("SELECT * FROM missing"))
    finally:
        await database.dispose()
