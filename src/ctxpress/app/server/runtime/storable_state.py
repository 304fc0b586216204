"""What enters a conversation's state can be stored by its checkpointer.

A model's reply is built from JSON the model wrote, and a tool may return any object. Some of that
is valid where it comes from and still not storable: an integer like `10**30` in a tool call's
arguments is valid JSON, but the checkpoint's msgpack encoding holds 64-bit integers only (and
nesting up to 255 levels). LangGraph saves a step's checkpoint after the step's update went out on
the stream, so such a value used to fail the run *after* the chat record (written from that update)
had kept the message the checkpoint lost.

`StorableStateMiddleware` asks the checkpointer's own serializer about every model reply and tool
result before it leaves its node, and looks at its nesting (the chat record's JSON rendering stops
at `serialization.MAX_DEPTH`). What either would not keep whole is repaired, always the same way,
and the message keeps its id, so the chat record and the checkpoint hold the same message:

- integers beyond 64 bits become their decimal text (a tool's argument schema then answers the model
  with a clear validation error);
- values nested deeper than `MAX_STORED_JSON_DEPTH` become their JSON text;
- anything else the serializer still refuses becomes JSON-ready values (`to_jsonable`: unknown
  objects become their repr).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from langchain.agents.middleware.types import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.types import Command

from ctxpress.app.server.serialization import INT64_MIN, MAX_STORED_JSON_DEPTH, to_jsonable

logger = logging.getLogger(__name__)

#: msgpack's unsigned range reaches 2**64 - 1; below INT64_MIN nothing is encodable.
MSGPACK_INT_MAX: Final = 2**64 - 1

ToolResult = ToolMessage | Command[Any]


class StorableStateMiddleware(AgentMiddleware[Any, Any]):
    """Repairs model replies and tool results the checkpointer could not store (module docstring)."""

    def __init__(self, serde: SerializerProtocol) -> None:
        super().__init__()
        self._serde = serde

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelCallResult:
        return self._storable_reply(handler(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelCallResult:
        return self._storable_reply(await handler(request))

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        return self._storable_tool_result(handler(request))

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        return self._storable_tool_result(await handler(request))

    def _storable_reply(self, response: ModelCallResult) -> ModelCallResult:
        if isinstance(response, AIMessage):
            return self.storable(response)
        if isinstance(response, ExtendedModelResponse):
            inner = response.model_response
            return ExtendedModelResponse(
                model_response=ModelResponse(
                    result=[self.storable(m) for m in inner.result],
                    structured_response=inner.structured_response,
                ),
                command=response.command,
            )
        return ModelResponse(
            result=[self.storable(m) for m in response.result],
            structured_response=response.structured_response,
        )

    def _storable_tool_result(self, result: ToolResult) -> ToolResult:
        return self.storable(result) if isinstance(result, ToolMessage) else result

    def storable(self, message: Any) -> Any:
        """`message` itself when the serializer takes it, else its repair (same class and id)."""
        if self._encodes(message) and not _nested_too_deep(message):
            return message
        logger.warning(
            "a %s (id %s) could not be stored in the checkpoint as it was; storing a repaired copy",
            type(message).__name__,
            getattr(message, "id", None),
        )
        repaired = message.model_copy(update=_bounded_fields(message))
        if self._encodes(repaired):
            return repaired
        # Only JSON types are left after this one (unknown objects become their repr).
        return message.model_copy(update=_jsonable_fields(message))

    def _encodes(self, value: Any) -> bool:
        try:
            self._serde.dumps_typed(value)
        except (TypeError, ValueError, OverflowError, RecursionError):  # msgpack's errors are TypeErrors
            return False
        return True


def bounded(value: Any, depth: int = 0) -> Any:
    """`value` with integers beyond msgpack's range as text and over-deep parts as JSON text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= MSGPACK_INT_MAX else str(value)
    if isinstance(value, dict | list | tuple) and depth >= MAX_STORED_JSON_DEPTH:
        return _as_json_text(value)
    if isinstance(value, dict):
        return {key: bounded(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(item, depth + 1) for item in value]
    return value


def _nested_too_deep(message: BaseMessage) -> bool:
    """Whether a field of `message` holds containers nested `MAX_STORED_JSON_DEPTH` levels or more."""
    pending: list[tuple[Any, int]] = [(getattr(message, name), 0) for name in type(message).model_fields]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list | tuple):
            if depth >= MAX_STORED_JSON_DEPTH:
                return True
            items = value.values() if isinstance(value, dict) else value
            pending.extend((item, depth + 1) for item in items)
    return False


def _bounded_fields(message: BaseMessage) -> dict[str, Any]:
    return {name: bounded(getattr(message, name)) for name in type(message).model_fields}


def _jsonable_fields(message: BaseMessage) -> dict[str, Any]:
    return {
        name: bounded(to_jsonable(getattr(message, name)))
        for name in type(message).model_fields
        if name not in ("id", "type")
    }


def _as_json_text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, RecursionError):
        return repr(value)[:10_000]
