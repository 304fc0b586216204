"""What the middleware reads from, and answers to, the LangGraph run around one model call: the
state's full message list, the stream writer, the thread id, and a response that carries a state
update."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.types import Command


def response_with_update(
    response: ModelResponse, update: dict[str, Any]
) -> ModelResponse | ExtendedModelResponse:
    if not update:
        return response
    return ExtendedModelResponse(model_response=response, command=Command(update=dict(update)))


def tool_result_key(message: ToolMessage) -> str:
    """A tool result's key: its message id, else the call it answers (a plain list has no ids; a
    provider may reuse call ids in every turn, so the call id alone is not unique)."""
    return f"id:{message.id}" if message.id else f"call:{message.tool_call_id}"


def tool_results_by_key(messages: Sequence[BaseMessage]) -> dict[str, ToolMessage]:
    """The state's tool results by `tool_result_key`."""
    return {tool_result_key(message): message for message in messages if isinstance(message, ToolMessage)}


def state_messages(request: ModelRequest) -> list[BaseMessage] | None:
    """The full state's messages; `request.messages` may be shorter (another middleware's view)."""
    messages = request.state.get("messages") if isinstance(request.state, dict) else None
    return list(messages) if isinstance(messages, list) else None


def stream_writer(request: ModelRequest) -> Callable[[Any], None]:
    runtime = getattr(request, "runtime", None)
    writer = getattr(runtime, "stream_writer", None)
    return writer if callable(writer) else (lambda _payload: None)


def thread_id() -> str | None:
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable", {})
    except RuntimeError:  # called outside a graph run
        return None
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else None
