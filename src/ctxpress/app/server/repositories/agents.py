from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import AgentRecord, utcnow


class AgentRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def upsert(
        self, name: str, *, description: str, model: str, builtin_model: bool, capabilities: list[str]
    ) -> AgentRecord:
        record = await self.session.get(AgentRecord, name)
        if record is None:
            record = AgentRecord(name=name)
            self.session.add(record)
        record.description = description
        record.model = model
        record.builtin_model = builtin_model
        record.capabilities = capabilities
        record.updated_at = utcnow()
        await self.session.flush()
        return record
