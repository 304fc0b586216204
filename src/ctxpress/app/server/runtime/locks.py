"""The per-conversation lock (S18): request intake, the run worker and manual compression all take it.

    async with database.session() as session:
        async with conversation_lock(session, conversation_id) as locked:
            busy = await locked.busy_state()          # None | BusyState("running" | "waiting_input" | "queued")
            ...                                       # read / write rows, update the checkpoint
        # leaving the block commits (or rolls back on an exception) and releases the lock

- PostgreSQL: `SELECT … FROM conversations WHERE id = … FOR UPDATE SKIP LOCKED` — a row lock held
  until the session's transaction ends, so it serialises service processes too. A waiter never
  waits inside the database: when the row is held it hands its connection back to the pool and
  tries again after a short pause (10 ms doubling to 200 ms). Waiting on the row lock itself would
  hold a pooled connection for as long as the holder -- a manual compression holds it for its whole
  summary call (S18) -- and twenty such waiters drained the pool for every other user (issue 16).
  `try_conversation_lock` tries once (how workers of several processes share the queue).
- SQLite (one service process per data directory): an `asyncio.Lock` per conversation. It
  serialises the same conversation and never blocks others; database writes stay short
  transactions, so holding it across a slow model call does not lock the file, and a waiter holds
  no connection.
- `refuse_while_compressing=True` (run intake): instead of waiting for a manual compression,
  raise 409 `thread_busy` with reason `compressing` and `Retry-After` at once
  (`conversations.compressing_until` says a compression holds the lock or is about to).

Never wait for a second conversation lock while holding one (no lock ordering is defined, so that
could deadlock). Trying one, which never waits, is fine: `try_second_conversation_lock` (how a
finishing run starts another conversation's queued run in its own transaction).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation, utcnow
from ctxpress.app.server.errors import NotFoundError, ThreadBusyError
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.runs import BusyState, RunRepository


class LockedConversation:
    """A conversation whose lock the current session holds."""

    def __init__(self, session: AsyncSession, conversation: Conversation) -> None:
        self.session = session
        self.conversation = conversation

    async def busy_state(self) -> BusyState | None:
        """Why the conversation is busy ("running" | "waiting_input" | "queued"), or None when idle."""
        return await RunRepository(self.session).busy_state(self.conversation.id)


#: Pauses between attempts at a PostgreSQL row lock someone else holds (seconds).
RETRY_FIRST_SECONDS: Final = 0.01
RETRY_MAX_SECONDS: Final = 0.2
#: `Retry-After` of a message refused while its conversation is compressed (seconds).
COMPRESSING_RETRY_AFTER_SECONDS: Final = 2


@asynccontextmanager
async def conversation_lock(
    session: AsyncSession, conversation_id: str, *, refuse_while_compressing: bool = False
) -> AsyncIterator[LockedConversation]:
    """Wait for the conversation's lock, holding no pooled connection while waiting. Raises
    `NotFoundError` for an unknown conversation; with `refuse_while_compressing`, `ThreadBusyError`
    (`compressing`) when a manual compression holds or claimed it."""
    pause = RETRY_FIRST_SECONDS
    while True:
        async with _hold(session, conversation_id, skip_locked=True) as locked:
            if locked is not None:
                yield locked
                return
        # Held by someone else (or gone): look why, with the connection handed back afterwards.
        await _refuse_if_compressing(session, conversation_id, refuse=refuse_while_compressing)
        if Database.of(session).backend == "sqlite":
            break  # the asyncio.Lock queues waiters fairly and holds no connection
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_SECONDS)
    async with _hold(session, conversation_id, skip_locked=False) as locked:
        if locked is None:
            raise NotFoundError("conversation not found")
        yield locked


async def _refuse_if_compressing(session: AsyncSession, conversation_id: str, *, refuse: bool = True) -> None:
    """`NotFoundError` for an unknown conversation; `ThreadBusyError` when `refuse` and a manual
    compression holds it. Ends the session's transaction either way (its connection goes back)."""
    conversations = ConversationRepository(session)
    try:
        if not await conversations.exists(conversation_id):
            raise NotFoundError("conversation not found")
        if refuse and await compression_holds(session, conversation_id):
            raise compressing_refusal()
    finally:
        await session.rollback()


async def compression_holds(session: AsyncSession, conversation_id: str) -> bool:
    """Whether a manual compression holds (or waits for) the conversation's lock: a live mark
    (`conversations.compressing_until`) and the lock held. A mark whose lock is free was left by a
    process that died (SIGKILL) or belongs to a compression that has not taken the lock yet; either
    way nobody is compressing now. Ends the session's transaction when it looked at the row lock."""
    database = Database.of(session)
    if await ConversationRepository(session).compressing_until(conversation_id, now=utcnow()) is None:
        return False
    if database.backend == "sqlite":
        return database.local_conversation_locks.get(conversation_id).locked()
    free = await ConversationRepository(session).read_for_lock(
        conversation_id, row_lock=True, skip_locked=True
    )
    await session.rollback()  # let go of the row if it was free
    return free is None


def compressing_refusal() -> ThreadBusyError:
    """409 `thread_busy` / `compressing` with `Retry-After`: what a message sent while a manual
    compression holds its conversation is answered."""
    return ThreadBusyError(
        BusyState.compressing(),
        "the conversation is being compressed; send the message again in a moment",
        retry_after=COMPRESSING_RETRY_AFTER_SECONDS,
    )


@asynccontextmanager
async def try_conversation_lock(
    session: AsyncSession, conversation_id: str
) -> AsyncIterator[LockedConversation | None]:
    """Take the lock only if nobody holds it; yields None otherwise (or when the conversation is gone)."""
    async with _hold(session, conversation_id, skip_locked=True) as locked:
        yield locked


@asynccontextmanager
async def try_second_conversation_lock(
    session: AsyncSession, conversation_id: str, *, holding: str
) -> AsyncIterator[LockedConversation | None]:
    """In a transaction that holds the lock of conversation `holding`: take `conversation_id`'s too
    if nobody holds it (None otherwise, or when the conversation is gone), never waiting. It is held
    until the transaction ends: the caller commits or rolls back before leaving this block. The
    conversation `holding` itself is simply given back, locked."""
    database = Database.of(session)
    local_lock: asyncio.Lock | None = None
    if database.backend == "sqlite" and conversation_id != holding:
        local_lock = database.local_conversation_locks.get(conversation_id)
        if local_lock.locked():
            yield None
            return
        await local_lock.acquire()  # free: taken at once
    try:
        # PostgreSQL: a row this transaction has locked already is no conflict for SKIP LOCKED.
        conversation = await ConversationRepository(session).read_for_lock(
            conversation_id, row_lock=database.backend == "postgresql", skip_locked=True
        )
        yield None if conversation is None else LockedConversation(session, conversation)
    finally:
        if local_lock is not None:
            local_lock.release()


@asynccontextmanager
async def _hold(
    session: AsyncSession, conversation_id: str, *, skip_locked: bool
) -> AsyncIterator[LockedConversation | None]:
    database = Database.of(session)
    local_lock: asyncio.Lock | None = None
    if database.backend == "sqlite":
        local_lock = database.local_conversation_locks.get(conversation_id)
        if skip_locked and local_lock.locked():
            yield None
            return
        await local_lock.acquire()
    try:
        conversation = await ConversationRepository(session).read_for_lock(
            conversation_id, row_lock=database.backend == "postgresql", skip_locked=skip_locked
        )
        if conversation is None:
            await session.rollback()
            yield None
            return
        try:
            yield LockedConversation(session, conversation)
        except BaseException:
            await session.rollback()
            raise
        await session.commit()
    finally:
        if local_lock is not None:
            local_lock.release()
