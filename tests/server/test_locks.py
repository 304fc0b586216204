"""The conversation lock (S18) on both databases: serialises one conversation, never blocks others."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import RUN_QUEUED, RUN_RUNNING, RUN_WAITING_INPUT, utcnow
from ctxpress.app.server.errors import NotFoundError
from ctxpress.app.server.repositories.runs import BusyState, RunRepository
from ctxpress.app.server.repositories.users import UserRepository
from ctxpress.app.server.runtime.locks import conversation_lock, try_conversation_lock
from ctxpress.app.server.usecases.auth import hash_token, new_token
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


async def test_a_lock_taken_for_a_tokens_owner_is_taken_only_for_an_active_token_of_the_owner(
    database: Database,
) -> None:
    """A message's intake authenticates its caller, checks the owner and takes the lock in one
    statement (`owner_token_sha256`); every other token leaves the lock free and reads no owner."""
    conversation_id = await add_conversation(database, owner="alice")
    await add_conversation(database, owner="bob")
    tokens = {label: new_token() for label in ("alice", "alice revoked", "alice expired", "bob")}
    async with database.session() as session:
        users = UserRepository(session)
        alice, bob = await users.by_name("alice"), await users.by_name("bob")
        assert alice is not None and bob is not None
        past = utcnow() - timedelta(seconds=1)
        await users.add_token(
            alice, hash_token(tokens["alice"]), "active", expires_at=utcnow() + timedelta(hours=1)
        )
        (await users.add_token(alice, hash_token(tokens["alice revoked"]), "revoked")).revoked_at = past
        await users.add_token(alice, hash_token(tokens["alice expired"]), "expired", expires_at=past)
        await users.add_token(bob, hash_token(tokens["bob"]), "another user's")
        await session.commit()

    digest = hash_token(tokens["alice"])
    async with (
        database.session() as session,
        try_conversation_lock(session, conversation_id, owner_token_sha256=digest) as locked,
    ):
        assert locked is not None and locked.owner is not None
        assert (locked.owner.name, locked.conversation.id) == ("alice", conversation_id)
        async with database.session() as other, try_conversation_lock(other, conversation_id) as second:
            assert second is None, "the lock is held"
    for label in ("alice revoked", "alice expired", "bob", "not stored"):
        digest = hash_token(tokens.get(label, new_token()))
        async with (
            database.session() as session,
            try_conversation_lock(session, conversation_id, owner_token_sha256=digest) as locked,
        ):
            assert locked is None, label
    async with database.session() as session, try_conversation_lock(session, conversation_id) as free:
        assert free is not None and free.owner is None, "nothing was left held"


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
