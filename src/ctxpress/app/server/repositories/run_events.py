from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import RunEvent, table_of
from ctxpress.app.server.serialization import to_jsonable

_EVENTS: Final = table_of(RunEvent)
# Ids in the order of the rows given: PostgreSQL inserts them in one statement that keeps the order,
# SQLite one statement per row. A Core insert, not the ORM's unit of work: the rows are never read
# back through this session, and the unit of work cost more than the statement itself.
_INSERT_EVENTS: Final = insert(_EVENTS).returning(_EVENTS.c.id, sort_by_parameter_order=True)


@dataclass(frozen=True)
class NewEvent:
    """An event to store: its type and its data (any value `to_jsonable` takes)."""

    type: str
    data: dict[str, Any]


@dataclass(frozen=True)
class StoredEvent:
    """A stored event: its id (the SSE id) and its data as stored (JSON-compatible)."""

    id: int
    type: str
    data: dict[str, Any]


class RunEventRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def append(self, run_id: str, events: Sequence[NewEvent]) -> list[StoredEvent]:
        """Store `events` in the session's transaction, ids increasing in the order given."""
        if not events:
            return []
        rows = [self.row(run_id, event) for event in events]
        connection = await self.session.connection()
        ids = (await connection.execute(_INSERT_EVENTS, rows)).scalars().all()
        return [StoredEvent(int(i), row["type"], row["data"]) for i, row in zip(ids, rows, strict=True)]

    @staticmethod
    def row(run_id: str, event: NewEvent) -> dict[str, Any]:
        """The values of `event`'s row, but for its id and time (the database's and the column
        default's); its data as stored (JSON-compatible)."""
        return {"run_id": run_id, "type": event.type, "data": to_jsonable(event.data)}

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
