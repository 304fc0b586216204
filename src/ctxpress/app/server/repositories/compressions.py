"""The compressions of a conversation as recorded: manual ones (their own table) and the automatic
ones its runs streamed (`context_compression` run events)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import ManualCompression, Run, RunEvent
from ctxpress.events import CONTEXT_COMPRESSION


class CompressionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add_manual(self, record: ManualCompression) -> ManualCompression:
        self.session.add(record)
        await self.session.flush()
        return record

    async def manual(self, conversation_id: str) -> list[ManualCompression]:
        query = (
            select(ManualCompression)
            .where(ManualCompression.conversation_id == conversation_id)
            .order_by(ManualCompression.id)
        )
        return list((await self.session.execute(query)).scalars())

    async def automatic(self, conversation_id: str) -> list[RunEvent]:
        """Every `context_compression` event of the conversation's runs, in the order they were stored."""
        query = (
            select(RunEvent)
            .join(Run, Run.id == RunEvent.run_id)
            .where(Run.conversation_id == conversation_id, RunEvent.type == CONTEXT_COMPRESSION)
            .order_by(RunEvent.id)
        )
        return list((await self.session.execute(query)).scalars())
