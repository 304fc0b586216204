"""Model usage per conversation (S26): every main-model and summary-model call, summed per provider.

- Main-model calls are aggregated per provider and model, except for providers in the exclusion
  list (default `siliconflow`, `siliconflow-cn`): those lines say "usage unavailable".
- Summary-model calls form their own category, so the operator sees the whole bill.
- The calls are recorded as they happen by `ctxpress.app.server.runtime.usage_recording`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import USAGE_MAIN, USAGE_SUMMARY
from ctxpress.app.server.repositories.usage import UsageRepository
from ctxpress.app.server.runtime.usage_recording import TOKEN_FIELDS, UsageExclusion, token_fields


class UsageService:
    def __init__(self, database: Database, *, excluded_providers: Sequence[str]) -> None:
        self.database = database
        self.exclusion = UsageExclusion.of(excluded_providers)

    async def summary(self, conversation_id: str) -> dict[str, Any]:
        async with self.database.session() as session:
            groups = await UsageRepository(session).totals(conversation_id)
        lines = []
        totals = {category: _zero_totals() for category in (USAGE_MAIN, USAGE_SUMMARY)}
        for group in groups:
            excluded = self.exclusion.excludes(group.provider)
            available = not excluded and group.reported_calls == group.calls
            line: dict[str, Any] = {
                "category": group.category,
                "provider": group.provider,
                "model": group.model,
                "calls": group.calls,
                "usage_available": available,
                "unavailable_reason": (
                    "provider excluded from usage aggregation"
                    if excluded
                    else None
                    if available
                    else f"{group.calls - group.reported_calls} call(s) reported no usage"
                ),
            }
            category_totals = totals[group.category]
            category_totals["calls"] += group.calls
            if excluded:
                category_totals["unavailable_calls"] += group.calls
                line.update(dict.fromkeys(TOKEN_FIELDS))
            else:
                category_totals["unavailable_calls"] += group.calls - group.reported_calls
                tokens = token_fields(group)
                line.update(tokens)
                for key, value in tokens.items():
                    category_totals[key] += value
            lines.append(line)
        return {
            "conversation_id": conversation_id,
            "excluded_providers": list(self.exclusion.providers),
            "lines": lines,
            "totals": totals,
        }


def _zero_totals() -> dict[str, int]:
    return {"calls": 0, "unavailable_calls": 0, **dict.fromkeys(TOKEN_FIELDS, 0)}
