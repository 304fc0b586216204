"""The per-conversation pressure record (S19, S22): one row per conversation, upserted."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import ConversationPressure, utcnow
from ctxpress.pressure import RequestPressure


class PressureRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, conversation_id: str) -> ConversationPressure | None:
        return await self.session.get(ConversationPressure, conversation_id, populate_existing=True)

    async def record(self, conversation_id: str, run_id: str | None, pressure: RequestPressure) -> None:
        """A main-model call's figures; they are current again (`stale` = False)."""
        now = utcnow()
        await self._upsert(
            conversation_id,
            {
                "run_id": run_id,
                "total_tokens": pressure.total,
                "threshold_tokens": pressure.threshold,
                "system_tokens": pressure.system,
                "tools_tokens": pressure.tools,
                "summary_tokens": pressure.summary,
                "messages_tokens": pressure.messages,
                "recorded_at": now,
                "stale": False,
                "updated_at": now,
            },
        )

    async def invalidate(self, conversation_id: str) -> None:
        """After a manual compression: keep the figures, but they no longer describe the state (S19)."""
        now = utcnow()
        await self._upsert(conversation_id, {"stale": True, "invalidated_at": now, "updated_at": now})

    async def _upsert(self, conversation_id: str, values: dict[str, Any]) -> None:
        # One statement on both databases: never a lost insert race between two service processes.
        dialect = self.session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        statement = insert(ConversationPressure).values(conversation_id=conversation_id, **values)
        statement = statement.on_conflict_do_update(index_elements=["conversation_id"], set_=values)
        await self.session.execute(statement)
