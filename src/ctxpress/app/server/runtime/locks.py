"""The per-conversation lock (S18): request intake, the run worker and manual compression all take it.

    async with database.session() as session:
        async with conversation_lock(session, conversation_id) as locked:
            busy = await locked.busy_state()          # None | BusyState("running" | "waiting_input" | "queued")
            ...                                       # read / write rows, update the checkpoint
        # leaving the block commits (or rolls back on an exception) and releases the lock

- PostgreSQL: `SELECT … FROM conversations WHERE id = … FOR UPDATE` — a row lock held until the
  session's transaction ends, so it serialises service processes too. `try_conversation_lock`
  adds `SKIP LOCKED` (how workers of several processes share the queue without waiting).
- SQLite (one service process per data directory): an `asyncio.Lock` per conversation. It
  serialises the same conversation and never blocks others; database writes stay short
  transactions, so holding it across a slow model call does not lock the file.

Never hold two conversation locks at once (no lock ordering is defined, so that could deadlock).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation
from ctxpress.app.server.errors import NotFoundError
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


@asynccontextmanager
async def conversation_lock(session: AsyncSession, conversation_id: str) -> AsyncIterator[LockedConversation]:
    """Wait for the conversation's lock. Raises `NotFoundError` for an unknown conversation."""
    async with _hold(session, conversation_id, skip_locked=False) as locked:
        if locked is None:
            raise NotFoundError("conversation not found")
        yield locked


@asynccontextmanager
async def try_conversation_lock(
    session: AsyncSession, conversation_id: str
) -> AsyncIterator[LockedConversation | None]:
    """Take the lock only if nobody holds it; yields None otherwise (or when the conversation is gone)."""
    async with _hold(session, conversation_id, skip_locked=True) as locked:
        yield locked


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
