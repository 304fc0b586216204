"""The complete chat record. Append and read only: there is deliberately no update or delete (S1, S16)."""

from __future__ import annotations

from langchain_core.messages import BaseMessage
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import Message
from ctxpress.app.server.serialization import message_role, storable_text, to_jsonable


class MessageRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def append(
        self, conversation_id: str, run_id: str | None, message: BaseMessage, *, new_id: bool = False
    ) -> Message | None:
        """Store `message` at the end of the record; `None` when a message with its id is already
        there. `new_id`: the caller just minted the message's id, so it is not looked up."""
        if not new_id and message.id is not None and await self._has_lc_id(conversation_id, message.id):
            return None
        record = Message(
            conversation_id=conversation_id,
            run_id=run_id,
            role=message_role(message),
            lc_id=message.id,
            content=storable_text(message.text),
            payload=to_jsonable(message),
        )
        self.session.add(record)
        await self.session.flush()
        return record

    async def _has_lc_id(self, conversation_id: str, lc_id: str) -> bool:
        query = select(Message.id).where(Message.conversation_id == conversation_id, Message.lc_id == lc_id)
        return (await self.session.execute(query.limit(1))).first() is not None

    async def page(self, conversation_id: str, *, after: int, limit: int) -> list[Message]:
        query = (
            select(Message)
            .where(Message.conversation_id == conversation_id, Message.id > after)
            .order_by(Message.id)
            .limit(limit)
        )
        return list((await self.session.execute(query)).scalars())

    async def all_for_conversation(self, conversation_id: str) -> list[Message]:
        """The whole chat record of the conversation, oldest first."""
        query = select(Message).where(Message.conversation_id == conversation_id).order_by(Message.id)
        return list((await self.session.execute(query)).scalars())

    async def count(self, conversation_id: str) -> int:
        query = select(func.count()).select_from(Message).where(Message.conversation_id == conversation_id)
        return int((await self.session.execute(query)).scalar_one())
