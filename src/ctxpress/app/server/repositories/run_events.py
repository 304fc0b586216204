from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import RunEvent
from ctxpress.app.server.serialization import to_jsonable


class RunEventRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def append(self, run_id: str, event_type: str, data: dict[str, Any]) -> RunEvent:
        event = RunEvent(run_id=run_id, type=event_type, data=to_jsonable(data))
        self.session.add(event)
        await self.session.flush()
        return event

    async def newest_id(self, run_id: str) -> int:
        """The id of the run's newest event (0 when it has none)."""
        query = select(func.max(RunEvent.id)).where(RunEvent.run_id == run_id)
        return int((await self.session.execute(query)).scalar_one_or_none() or 0)

    async def after(self, run_id: str, after_id: int, *, limit: int) -> list[RunEvent]:
        query = (
            select(RunEvent)
            .where(RunEvent.run_id == run_id, RunEvent.id > after_id)
            .order_by(RunEvent.id)
            .limit(limit)
        )
        return list((await self.session.execute(query)).scalars())

    async def of_runs(self, run_ids: list[str]) -> list[RunEvent]:
        """Every event of these runs, in the order they were stored."""
        if not run_ids:
            return []
        query = select(RunEvent).where(RunEvent.run_id.in_(run_ids)).order_by(RunEvent.id)
        return list((await self.session.execute(query)).scalars())
