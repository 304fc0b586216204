"""Request pressure for the status panel (S19, S22): recorded per main-model call, estimated on demand.

Recording: every agent's `ContextCompressionMiddleware` gets `publish_pressure` as its `on_pressure`
callback. It puts the figure on the run's stream as a `context_pressure` custom event — the
middleware is built once per agent, so it knows no conversation, but the run executor does: it
stores the event like any other (SSE replay) and upserts the conversation's pressure row in the
same transaction. Nothing is written from inside the model call, so the call never waits on the
database; sub-agents' figures (namespaced events) are not the conversation's and are not recorded.

Estimating: `estimate_next_input` measures what the main model would receive now — the agent's
system prompt and tool schemas, the current summary and the raw messages after its cutoff — with
the same `measure_request` the middleware uses, so it is right even when the record is stale.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.config import get_stream_writer

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import ConversationPressure
from ctxpress.app.server.repositories.pressure import PressureRepository
from ctxpress.app.server.services.events import CONTEXT_PRESSURE
from ctxpress.config import CompressionConfig
from ctxpress.middleware import EVENT_KEY
from ctxpress.pressure import SUGGEST_COMPRESS_RATIO, RequestPressure, measure_request
from ctxpress.summary.event import EffectiveMessages, effective_messages
from ctxpress.tokens import TokenCounter

logger = logging.getLogger(__name__)

#: The fields of a `context_pressure` event that make up a `RequestPressure`.
_FIELDS = ("total", "threshold", "system", "tools", "summary", "messages")


def publish_pressure(pressure: RequestPressure) -> None:
    """`on_pressure` of the middleware: hand the figure to the run's stream (see the module docstring)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:  # a model call outside a graph run: nobody to tell
        return
    writer({"type": CONTEXT_PRESSURE, **pressure.as_dict()})


def pressure_from_event(data: Mapping[str, Any]) -> RequestPressure | None:
    """The `RequestPressure` of a root-agent `context_pressure` event; None for anything else."""
    if data.get("namespace"):  # a sub-agent's model call: not the conversation's next input
        return None
    values: list[int] = []
    for name in _FIELDS:
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            logger.warning("ignoring a malformed context_pressure event (%s=%r)", name, value)
            return None
        values.append(value)
    return RequestPressure(*values)


async def record_pressure_event(
    repository: PressureRepository, conversation_id: str, run_id: str, data: Mapping[str, Any]
) -> None:
    """Called by the run executor for each `context_pressure` event it stores."""
    pressure = pressure_from_event(data)
    if pressure is not None:
        await repository.record(conversation_id, run_id, pressure)


def system_message_of(system_prompt: str) -> SystemMessage | None:
    """The system message `create_agent` builds from the agent's prompt."""
    return SystemMessage(system_prompt) if system_prompt else None


@dataclass(frozen=True)
class NextInputEstimate:
    pressure: RequestPressure
    effective: EffectiveMessages
    message_count: int


def estimate_next_input(
    values: Mapping[str, Any],
    *,
    system_prompt: str,
    tools: Sequence[Any],
    config: CompressionConfig,
    counter: TokenCounter | None = None,
) -> NextInputEstimate:
    """What the main model would receive from state `values` now (before any compaction it may trigger).

    Uses the effective messages (summary + raw tail, S15): the figure the middleware compares
    with the threshold at the next call.
    """
    messages: list[BaseMessage] = list(values.get("messages") or [])
    effective = effective_messages(messages, values.get(EVENT_KEY))
    pressure = measure_request(
        effective.messages, system_message_of(system_prompt), tools, config, counter=counter
    )
    return NextInputEstimate(pressure, effective, len(messages))


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
