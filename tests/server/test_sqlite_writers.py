"""SQLite write transactions of one process take turns in process (`db/sqlite_writers.py`, issue 17).

The engines here have SQLite's busy timeout at zero: a write that met another transaction's lock in
SQLite would fail at once ("database is locked"). With the writer turns it waits for the other
transaction to end instead, and is never in SQLite's busy handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ctxpress.app.server.db.sqlite_writers import SqliteWriterTurns, is_write, writes_first


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", connect_args={"timeout": 0})
    async with engine.begin() as connection:
        await connection.execute(text("PRAGMA journal_mode=WAL"))
        await connection.execute(text("CREATE TABLE log (id INTEGER PRIMARY KEY, who TEXT)"))
    yield engine
    await engine.dispose()


async def _write(engine: AsyncEngine, who: str, *, hold: asyncio.Event | None = None) -> None:
    async with engine.connect() as connection:
        await connection.execute(text("SELECT count(*) FROM log"))  # a read first, as sessions do
        await connection.execute(text("INSERT INTO log (who) VALUES (:who)"), {"who": who})
        if hold is not None:
            await hold.wait()
        await connection.commit()


async def _holding_first_then(engine: AsyncEngine, others: list[str]) -> None:
    """`first` writes and holds its transaction open until every other writer is waiting."""
    release = asyncio.Event()
    first = asyncio.create_task(_write(engine, "first", hold=release))
    await asyncio.sleep(0.05)  # `first` holds SQLite's write lock
    rest = [asyncio.create_task(_write(engine, who)) for who in others]
    await asyncio.sleep(0.2)  # they met it
    release.set()
    outcomes = await asyncio.gather(first, *rest, return_exceptions=True)  # each one ends
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


async def test_without_turns_a_second_writer_meets_sqlites_lock(engine: AsyncEngine) -> None:
    """The premise of the test below: with a zero busy timeout SQLite refuses the second writer."""
    with pytest.raises(OperationalError, match="database is locked"):
        await _holding_first_then(engine, ["second"])


async def test_writers_wait_for_their_turn_instead_of_meeting_sqlites_lock(engine: AsyncEngine) -> None:
    SqliteWriterTurns(timeout_seconds=10).install(engine)
    others = [f"w{n}" for n in range(8)]
    await _holding_first_then(engine, others)
    async with engine.connect() as connection:
        rows = (await connection.execute(text("SELECT who FROM log ORDER BY id"))).scalars().all()
    # Each waited for the one before it to end (in the order they reached their first write).
    assert rows[0] == "first" and sorted(rows[1:]) == others


async def _write_first(engine: AsyncEngine, who: str) -> None:
    with writes_first():
        await _write(engine, who)


async def test_a_write_begun_under_writes_first_is_served_before_the_writes_waiting_already(
    engine: AsyncEngine,
) -> None:
    """How a message's intake goes before the runs' step stores on SQLite (`intake_activity`)."""
    SqliteWriterTurns(timeout_seconds=10).install(engine)
    release = asyncio.Event()
    holder = asyncio.create_task(_write(engine, "holder", hold=release))
    await asyncio.sleep(0.05)
    waiting = [asyncio.create_task(_write(engine, f"run step {n}")) for n in range(3)]
    await asyncio.sleep(0.1)  # they wait for the turn, in this order
    intakes = [asyncio.create_task(_write_first(engine, f"intake {n}")) for n in range(2)]
    await asyncio.sleep(0.1)
    release.set()
    await asyncio.gather(holder, *waiting, *intakes)
    async with engine.connect() as connection:
        rows = (await connection.execute(text("SELECT who FROM log ORDER BY id"))).scalars().all()
    # (Within a line the order is the order of arrival at the first write, which the reads before
    # it, each on its own connection's thread, do not fix.)
    assert rows[0] == "holder"
    assert sorted(rows[1:3]) == ["intake 0", "intake 1"]
    assert sorted(rows[3:]) == ["run step 0", "run step 1", "run step 2"]


async def test_a_wait_for_the_turn_that_is_given_up_passes_the_turn_on(engine: AsyncEngine) -> None:
    SqliteWriterTurns(timeout_seconds=10).install(engine)
    release = asyncio.Event()
    holder = asyncio.create_task(_write(engine, "holder", hold=release))
    await asyncio.sleep(0.05)
    given_up = asyncio.create_task(_write_first(engine, "given up"))
    waiting = asyncio.create_task(_write(engine, "next"))
    await asyncio.sleep(0.1)
    given_up.cancel()
    release.set()
    await asyncio.gather(holder, waiting)
    assert given_up.cancelled()
    async with engine.connect() as connection:
        rows = (await connection.execute(text("SELECT who FROM log ORDER BY id"))).scalars().all()
    assert rows == ["holder", "next"]


async def test_a_writer_that_gets_no_turn_fails_as_sqlite_would(engine: AsyncEngine) -> None:
    SqliteWriterTurns(timeout_seconds=0.05).install(engine)
    with pytest.raises(OperationalError, match="database is locked"):
        await _holding_first_then(engine, ["second"])
    async with engine.connect() as connection:
        rows = (await connection.execute(text("SELECT who FROM log"))).scalars().all()
    assert rows == ["first"], "the writer that held its turn committed"


@pytest.mark.parametrize(
    ("statement", "writes"),
    [
        ("INSERT INTO log VALUES (1)", True),
        ("  update log set who = 'x'", True),
        ("DELETE FROM log", True),
        ("REPLACE INTO log VALUES (1, 'x')", True),
        ("SELECT * FROM log", False),
        ("PRAGMA wal_checkpoint", False),
    ],
)
def test_which_statements_take_a_turn(statement: str, writes: bool) -> None:
    assert is_write(statement) is writes
