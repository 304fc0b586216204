from __future__ import annotations

from datetime import datetime
from types import MappingProxyType
from typing import Any, Final

from sqlalchemy import Select, String, Update, bindparam, case, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from ctxpress.app.server.db.models import Conversation, is_public_id, utcnow
from ctxpress.app.server.db.one_statement import Write


def _conversation_for_lock(row_lock: bool, skip_locked: bool) -> Select[Conversation]:
    query = (
        select(Conversation)
        .where(Conversation.id == bindparam("conversation_id"))
        .execution_options(populate_existing=True)
    )
    return query.with_for_update(skip_locked=skip_locked) if row_lock else query


def _take_queue_seq(naming: bool) -> Update:
    title = case((Conversation.title == "", bindparam("title", type_=String)), else_=Conversation.title)
    return (
        update(Conversation)
        .where(Conversation.id == bindparam("conversation_id"))
        .values(
            next_queue_seq=bindparam("next_queue_seq"),
            updated_at=bindparam("updated_at"),
            **({"title": title} if naming else {}),
        )
        # The caller sets the loaded row's new values itself (`take_queue_seq`): no evaluation of
        # the statement against the session's objects.
        .execution_options(synchronize_session=False)
    )


# Statements every message and run step executes, built once (building one costs about as much as
# running it on SQLite): `read_for_lock`'s by (row_lock, skip_locked), `take_queue_seq`'s by
# whether it also names an untitled conversation.
_READ_FOR_LOCK: Final = MappingProxyType(
    {(lock, skip): _conversation_for_lock(lock, skip) for lock in (False, True) for skip in (False, True)}
)
TAKE_QUEUE_SEQ: Final = (_take_queue_seq(False), _take_queue_seq(True))


class ConversationRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, conversation: Conversation) -> Conversation:
        self.session.add(conversation)
        await self.session.flush()
        return conversation

    async def get(self, conversation_id: str) -> Conversation | None:
        return await self.session.get(Conversation, conversation_id)

    async def read_for_lock(
        self, conversation_id: str, *, row_lock: bool, skip_locked: bool
    ) -> Conversation | None:
        """The conversation read afresh (never a stale identity-map copy), for the conversation lock.

        `row_lock`: `SELECT … FOR UPDATE` (PostgreSQL), held until the transaction ends;
        `skip_locked`: with `SKIP LOCKED`, so a row another transaction holds reads as None.
        """
        query = _READ_FOR_LOCK[row_lock, skip_locked]
        return (await self.session.execute(query, {"conversation_id": conversation_id})).scalar_one_or_none()

    async def claim_compression(
        self, conversation_id: str, *, now: datetime, until: datetime, force: bool = False
    ) -> bool:
        """Mark the conversation as being compressed until `until`, unless a live mark is there
        (`force`: replace it -- the caller found that nobody holds the lock).

        A conversation with a live mark is not matched, so this never waits for the row lock of the
        compression that set it; it may wait for a short holder (intake, the worker)."""
        condition = or_(Conversation.compressing_until.is_(None), Conversation.compressing_until <= now)
        statement = (
            update(Conversation)
            .where(
                Conversation.id == conversation_id, condition if not force else Conversation.id.is_not(None)
            )
            .values(compressing_until=until)
            .returning(Conversation.id)
        )
        return (await self.session.execute(statement)).first() is not None

    async def release_compression(self, conversation_id: str, *, until: datetime) -> None:
        """Remove the mark `claim_compression` set (another claim's mark is left alone)."""
        statement = (
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.compressing_until == until)
            .values(compressing_until=None)
        )
        await self.session.execute(statement)

    async def compressing_until(self, conversation_id: str, *, now: datetime) -> datetime | None:
        """The live compression mark of the conversation, if any (a plain read: never waits)."""
        query = select(Conversation.compressing_until).where(Conversation.id == conversation_id)
        until = (await self.session.execute(query)).scalar_one_or_none()
        return until if until is not None and until > now else None

    async def exists(self, conversation_id: str) -> bool:
        query = select(Conversation.id).where(Conversation.id == conversation_id)
        return (await self.session.execute(query)).first() is not None

    async def get_owned(self, conversation_id: str, owner_id: str) -> Conversation | None:
        if not is_public_id(conversation_id):
            return None
        query = select(Conversation).where(
            Conversation.id == conversation_id, Conversation.owner_id == owner_id
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def list_owned(
        self,
        owner_id: str,
        *,
        before: datetime | None,
        limit: int,
        title_contains: str = "",
        archived: bool = False,
    ) -> list[Conversation]:
        """Newest first; `before` is the `created_at` of the last item of the previous page.

        Listed or archived ones (`archived`), with `title_contains` in the title (case-insensitive
        for Latin letters; `%` and `_` are matched literally)."""
        query = select(Conversation).where(
            Conversation.owner_id == owner_id,
            Conversation.archived_at.is_not(None) if archived else Conversation.archived_at.is_(None),
        )
        if title_contains:
            query = query.where(Conversation.title.ilike(f"%{_escape_like(title_contains)}%", escape="\\"))
        if before is not None:
            query = query.where(Conversation.created_at < before)
        query = query.order_by(Conversation.created_at.desc(), Conversation.id.desc()).limit(limit)
        return list((await self.session.execute(query)).scalars())

    async def set_title(self, conversation: Conversation, title: str) -> None:
        conversation.title = title
        conversation.updated_at = utcnow()
        await self.session.flush()

    async def set_archived(self, conversation: Conversation, archived: bool) -> None:
        conversation.archived_at = utcnow() if archived else None
        conversation.updated_at = utcnow()
        await self.session.flush()

    async def take_queue_seq(
        self, conversation: Conversation, *, title_if_untitled: str | None = None
    ) -> int:
        """The next place in the conversation's FIFO, taken (the caller holds the conversation lock),
        and the conversation touched; an untitled one is named `title_if_untitled` in the same
        statement (a rename committed meanwhile wins: the condition is evaluated by the database)."""
        queue_seq = conversation.next_queue_seq
        write = self.queue_seq_write(conversation, title_if_untitled=title_if_untitled)
        await self.session.execute(write.statement, write.parameters)
        return queue_seq

    @staticmethod
    def queue_seq_write(conversation: Conversation, *, title_if_untitled: str | None = None) -> Write:
        """`take_queue_seq`'s statement, for the caller to run in this transaction (alone, or with
        other writes: `db.one_statement`); it takes the place `conversation.next_queue_seq`.

        The statement goes around the unit of work, so the loaded row learns its new values here,
        without a flush of its own (its title is left as read: the database decides it). Should the
        write fail, the transaction fails with it, and the session with its rows is dropped."""
        next_queue_seq, now = conversation.next_queue_seq + 1, utcnow()
        values: dict[str, Any] = {
            "conversation_id": conversation.id,
            "next_queue_seq": next_queue_seq,
            "updated_at": now,
        }
        if title_if_untitled:
            values["title"] = title_if_untitled
        set_committed_value(conversation, "next_queue_seq", next_queue_seq)
        set_committed_value(conversation, "updated_at", now)
        return Write(TAKE_QUEUE_SEQ[bool(title_if_untitled)], values)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
