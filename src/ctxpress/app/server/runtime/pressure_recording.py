"""Request pressure recorded per main-model call (S22), from inside the run.

Every agent's `ContextCompressionMiddleware` gets `publish_pressure` as its `on_pressure`
callback. It puts the figure on the run's stream as a `context_pressure` custom event — the
middleware is built once per agent, so it knows no conversation, but the run executor does: it
stores the event (SSE replay) and upserts the conversation's pressure row in one transaction
(`record_pressure_event`) -- the transaction of the step that answered the call, as the middleware
reports a call once the model has answered. Nothing is written from inside the model call, so the
call never waits on the database; sub-agents' figures (namespaced events) are not the
conversation's and are not recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from langgraph.config import get_stream_writer

from ctxpress.app.server.repositories.pressure import PressureRepository
from ctxpress.events import pressure_event
from ctxpress.pressure import RequestPressure

logger = logging.getLogger(__name__)

#: The fields of a `context_pressure` event that make up a `RequestPressure`.
_FIELDS = tuple(field.name for field in fields(RequestPressure))


def publish_pressure(pressure: RequestPressure) -> None:
    """`on_pressure` of the middleware: hand the figure to the run's stream (see the module docstring)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:  # a model call outside a graph run: nobody to tell
        return
    writer(pressure_event(pressure))


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
