"""Request pressure for the status panel (S19, S22): the recorded figure and an estimate on demand.

Recording, per main-model call, is runtime work: `ctxpress.app.server.runtime.pressure_recording`.

Estimating: `estimate_next_input` measures what the main model would receive now — the agent's
system prompt and tool schemas, the current summary and the messages after its cutoff — with the
same `measure_request` the middleware uses, so it is right even when the record is stale. Like the
middleware (S4, S5): below the threshold the messages go as they are; at or above it L1 compacts
the large tool results first, and that figure is the request the model receives and the one that
decides whether a summary runs. L1 is deterministic, so the view is built for real, on a workdir
that keeps nothing (`DryRunWorkdir`). Both figures are returned: `pressure` (as sent; the ring and
the S22 hint) and `raw` (before L1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import ConversationPressure
from ctxpress.app.server.repositories.pressure import PressureRepository
from ctxpress.compaction import CompactionCache, compact_view
from ctxpress.config import CompressionConfig
from ctxpress.middleware import EVENT_KEY
from ctxpress.pressure import SUGGEST_COMPRESS_RATIO, RequestPressure, measure_request
from ctxpress.summary.event import EffectiveMessages, effective_messages
from ctxpress.tokens import TokenCounter
from ctxpress.workdir import DryRunWorkdir


def system_message_of(system_prompt: str) -> SystemMessage | None:
    """The system message `create_agent` builds from the agent's prompt."""
    return SystemMessage(system_prompt) if system_prompt else None


@dataclass(frozen=True)
class NextInputEstimate:
    #: The next request as the main model will receive it (after L1 when L1 would run).
    pressure: RequestPressure
    #: The same request before L1 (equal to `pressure` below the threshold).
    raw: RequestPressure
    effective: EffectiveMessages
    message_count: int

    @property
    def compacted(self) -> bool:
        """L1 would run on the next call (the raw request is at or above the threshold)."""
        return self.raw.total >= self.raw.threshold


def estimate_next_input(
    values: Mapping[str, Any],
    *,
    system_prompt: str,
    tools: Sequence[Any],
    config: CompressionConfig,
    counter: TokenCounter | None = None,
) -> NextInputEstimate:
    """What the main model would receive from state `values` now, as the middleware would send it.

    Uses the effective messages (summary + raw tail, S15), compacted by L1 when they reach the
    threshold (S5): the figure the middleware compares with the threshold before it summarises.
    """
    messages: list[BaseMessage] = list(values.get("messages") or [])
    effective = effective_messages(messages, values.get(EVENT_KEY))
    system_message = system_message_of(system_prompt)
    raw = measure_request(effective.messages, system_message, tools, config, counter=counter)
    if raw.total < raw.threshold:
        return NextInputEstimate(raw, raw, effective, len(messages))
    view = compact_view(effective.messages, config, DryRunWorkdir(), cache=CompactionCache())
    sent = measure_request(view.messages, system_message, tools, config, counter=counter)
    return NextInputEstimate(sent, raw, effective, len(messages))


def suggests_compression(pressure: RequestPressure, *, capability: bool) -> bool:
    """S22: the hint only (never a trigger); shown only where the compress button exists (S17)."""
    return capability and pressure.ratio >= SUGGEST_COMPRESS_RATIO


@dataclass(frozen=True)
class RecordedPressure:
    """The last recorded main-model request of a conversation, and whether it is stale."""

    pressure: RequestPressure | None
    run_id: str | None
    recorded_at: datetime | None
    stale: bool
    invalidated_at: datetime | None

    @classmethod
    def of(cls, row: ConversationPressure | None) -> RecordedPressure:
        if row is None:
            return cls(None, None, None, False, None)
        figures = (
            row.total_tokens,
            row.threshold_tokens,
            row.system_tokens,
            row.tools_tokens,
            row.summary_tokens,
            row.messages_tokens,
        )
        pressure = None
        if row.recorded_at is not None and all(value is not None for value in figures):
            pressure = RequestPressure(*(int(value) for value in figures if value is not None))
        return cls(pressure, row.run_id, row.recorded_at, row.stale, row.invalidated_at)


class PressureService:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def recorded(self, conversation_id: str) -> RecordedPressure:
        async with self.database.session() as session:
            return RecordedPressure.of(await PressureRepository(session).get(conversation_id))
