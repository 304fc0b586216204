"""The complete chat record. Append and read only: there is deliberately no update or delete (S1, S16)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final

from langchain_core.messages import BaseMessage
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import Message, table_of
from ctxpress.app.server.serialization import message_role, storable_text, to_jsonable

_MESSAGES: Final = table_of(Message)
#: Insert unless the conversation already holds a message with this LangChain id (its unique key):
#: one statement instead of a look-up and an insert, and never an error when two writers race.
_INSERT_NEW: Final = MappingProxyType(
    {
        name: dialect_insert(_MESSAGES)
        .on_conflict_do_nothing(index_elements=["conversation_id", "lc_id"])
        .returning(_MESSAGES.c.id)
        for name, dialect_insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
    }
)


class MessageRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def append(self, conversation_id: str, run_id: str | None, message: BaseMessage) -> int | None:
        """Store `message` at the end of the record and return its record id; `None` when a message
        with its id is already there."""
        connection = await self.session.connection()
        statement = _INSERT_NEW[connection.dialect.name]
        return (
            await connection.execute(statement, self.row(conversation_id, run_id, message))
        ).scalar_one_or_none()

    @staticmethod
    def row(conversation_id: str, run_id: str | None, message: BaseMessage) -> dict[str, Any]:
        """The values of `message`'s row, but for its id and time (the database's and the column
        default's)."""
        return {
            "conversation_id": conversation_id,
            "run_id": run_id,
            "role": message_role(message),
            "lc_id": message.id,
            "content": storable_text(message.text),
            "payload": to_jsonable(message),
        }

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
