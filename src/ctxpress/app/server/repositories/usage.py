from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Integer, case, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import UsageRecord, table_of

#: A Core insert (executemany): the rows are never read back through the writing session.
_INSERT_USAGE: Final = insert(table_of(UsageRecord))


@dataclass(frozen=True)
class UsageTotals:
    """Sums over one (category, provider, model) group; tokens count only calls that reported usage."""

    category: str
    provider: str
    model: str
    calls: int
    reported_calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    total_tokens: int


class UsageRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, rows: Sequence[dict[str, Any]]) -> None:
        """Store model calls' usage rows (`UsageDraft.to_row`) in the session's transaction."""
        if rows:
            connection = await self.session.connection()
            await connection.execute(_INSERT_USAGE, list(rows))

    async def totals(self, conversation_id: str) -> list[UsageTotals]:
        query = (
            select(
                UsageRecord.category,
                UsageRecord.provider,
                UsageRecord.model,
                func.count(),
                func.sum(case((UsageRecord.reported.is_(True), 1), else_=0), type_=Integer),
                func.sum(UsageRecord.input_tokens),
                func.sum(UsageRecord.output_tokens),
                func.sum(UsageRecord.cache_read_tokens),
                func.sum(UsageRecord.cache_creation_tokens),
                func.sum(UsageRecord.total_tokens),
            )
            .where(UsageRecord.conversation_id == conversation_id)
            .group_by(UsageRecord.category, UsageRecord.provider, UsageRecord.model)
            .order_by(UsageRecord.category, UsageRecord.provider, UsageRecord.model)
        )
        return [
            UsageTotals(category, provider, model, *(int(value or 0) for value in numbers))
            for category, provider, model, *numbers in (await self.session.execute(query)).all()
        ]
