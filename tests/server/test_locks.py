"""The conversation lock (S18) on both databases: serialises one conversation, never blocks others."""

from __future__ import annotations

import asyncio

import pytest

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import RUN_QUEUED, RUN_RUNNING, RUN_WAITING_INPUT
from ctxpress.app.server.errors import NotFoundError
from ctxpress.app.server.repositories.runs import BusyState, RunRepository
from ctxpress.app.server.runtime.locks import conversation_lock, try_conversation_lock
from ctxpress.app.testing.records import add_conversation

HOLD_SECONDS = 0.3


async def test_same_conversation_is_serialised_others_are_not(database: Database) -> None:
    first, second = await add_conversation(database), await add_conversation(database)
    holding = asyncio.Event()
    timeline: list[str] = []

    async def hold(conversation_id: str) -> None:
        async with database.session() as session, conversation_lock(session, conversation_id):
            timeline.append("A acquired")
            holding.set()
            await asyncio.sleep(HOLD_SECONDS)
            timeline.append("A releases")

    async def take(conversation_id: str, label: str) -> float:
        await holding.wait()
        started = asyncio.get_running_loop().time()
        async with database.session() as session, conversation_lock(session, conversation_id):
            timeline.append(f"{label} acquired")
        return asyncio.get_running_loop().time() - started

    _, waited_same, waited_other = await asyncio.gather(hold(first), take(first, "B"), take(second, "C"))
    assert waited_same >= HOLD_SECONDS * 0.8
    assert waited_other < HOLD_SECONDS * 0.5, "another conversation must not wait"
    assert timeline.index("C acquired") < timeline.index("A releases") < timeline.index("B acquired")


async def test_try_lock_skips_a_held_conversation(database: Database) -> None:
    conversation_id = await add_conversation(database)
    async with (
        database.session() as holder,
        conversation_lock(holder, conversation_id),
        database.session() as other,
        try_conversation_lock(other, conversation_id) as locked,
    ):
        assert locked is None
    async with database.session() as session, try_conversation_lock(session, conversation_id) as locked:
        assert locked is not None and locked.conversation.id == conversation_id


async def test_unknown_conversation_and_rollback_on_error(database: Database) -> None:
    with pytest.raises(NotFoundError):
        async with database.session() as session, conversation_lock(session, "0" * 32):
            pass
    conversation_id = await add_conversation(database)
    with pytest.raises(RuntimeError):
        async with database.session() as session, conversation_lock(session, conversation_id) as locked:
            await RunRepository(session).add(locked.conversation, input={"text": "x", "message_id": "m"})
            raise RuntimeError("boom")
    async with database.session() as session:
        assert await RunRepository(session).busy_state(conversation_id) is None, (
            "the failed block wrote nothing"
        )
    # …and the lock was released: it can be taken again at once.
    async with database.session() as session, try_conversation_lock(session, conversation_id) as locked:
        assert locked is not None


async def test_busy_state_says_why(database: Database) -> None:
    conversation_id = await add_conversation(database)

    async def add_run(status: str) -> str:
        async with database.session() as session, conversation_lock(session, conversation_id) as locked:
            run = await RunRepository(session).add(
                locked.conversation, input={"text": status, "message_id": status}
            )
            run.status = status
            return run.id

    async def busy() -> BusyState | None:
        async with database.session() as session, conversation_lock(session, conversation_id) as locked:
            return await locked.busy_state()

    assert await busy() is None
    queued = await add_run(RUN_QUEUED)
    assert await busy() == BusyState("queued", None, 1)
    waiting = await add_run(RUN_WAITING_INPUT)
    assert await busy() == BusyState("waiting_input", waiting, 1)
    async with database.session() as session, conversation_lock(session, conversation_id):
        runs = RunRepository(session)
        run = await runs.get(waiting)
        assert run is not None
        run.status = RUN_RUNNING
    assert await busy() == BusyState("running", waiting, 1)
    async with database.session() as session:
        run = await RunRepository(session).get(queued)
        assert run is not None and await RunRepository(session).queue_position(run) == 1
