"""Replaying a recorded conversation through the middleware, one model call at a time (S23).

Every AI message of the recording marks a model call: the state before it is the request, the
recorded AI message is the model's answer. The middleware runs exactly as inside an agent; its
state updates (the summary event, trimmed messages) are applied like LangGraph's reducers would.
Used by `ctxpress replay`, by the benchmarks and by the tests over real traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langgraph.runtime import Runtime

from ctxpress.events import COMPLETED, CONTEXT_COMPRESSION, CompressionEvent, Level
from ctxpress.middleware import EVENT_KEY, ContextCompressionMiddleware
from ctxpress.summary.event import effective_messages


@dataclass
class ReplayStep:
    """One model call of the replay."""

    position: int  # index of the recorded AI message
    tokens_before: int  # the effective request before compression
    tokens_sent: int  # what the model received
    events: list[CompressionEvent]
    view: list[BaseMessage] | None = None

    @property
    def level(self) -> Level | None:
        done = [e for e in self.events if e["status"] == COMPLETED]
        return done[-1]["level"] if done else None

    @property
    def files_written(self) -> list[str]:
        written = [
            path for e in self.events if e["status"] == COMPLETED for path in e.get("files_written", [])
        ]
        histories = [path for e in self.events if e["status"] == COMPLETED and (path := e.get("file_path"))]
        return written + histories


@dataclass
class ReplayResult:
    steps: list[ReplayStep] = field(default_factory=list)
    messages: list[BaseMessage] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # every _summarization_event, in order

    @property
    def summary_calls(self) -> int:
        return len(self.events)


def _split_system(messages: Sequence[BaseMessage]) -> tuple[SystemMessage | None, list[BaseMessage]]:
    if messages and isinstance(messages[0], SystemMessage):
        return messages[0], list(messages[1:])
    return None, list(messages)


def _apply_update(state: dict[str, Any], update: dict[str, Any]) -> None:
    if EVENT_KEY in update:
        state[EVENT_KEY] = update[EVENT_KEY]
    replacements = {m.id: m for m in update.get("messages", [])}
    if replacements:  # add_messages semantics: same id replaces
        state["messages"] = [replacements.get(m.id, m) for m in state["messages"]]


def replay_messages(
    messages: Sequence[BaseMessage],
    middleware: ContextCompressionMiddleware,
    *,
    model: BaseChatModel,
    tools: Sequence[Any] = (),
    keep_views: bool = False,
    on_step: Callable[[ReplayStep], None] | None = None,
) -> ReplayResult:
    """Replay `messages` (a provider-valid conversation) through `middleware`."""
    system, rest = _split_system(messages)
    state: dict[str, Any] = {"messages": []}
    result = ReplayResult()
    profile = middleware.config.token_profile
    for position, message in enumerate(rest):
        if isinstance(message, AIMessage) and state["messages"]:
            step = _one_call(middleware, model, system, list(tools), state, message, position, profile)
            if not keep_views:
                step.view = None
            result.steps.append(step)
            if state.get(EVENT_KEY) is not None and (
                not result.events or result.events[-1] is not state[EVENT_KEY]
            ):
                result.events.append(state[EVENT_KEY])
            if on_step is not None:
                on_step(step)
        state["messages"] = [*state["messages"], message]
    result.messages = state["messages"]
    return result


def _one_call(
    middleware: ContextCompressionMiddleware,
    model: BaseChatModel,
    system: SystemMessage | None,
    tools: list[Any],
    state: dict[str, Any],
    answer: AIMessage,
    position: int,
    profile: str,
) -> ReplayStep:
    events: list[Any] = []  # everything the stream writer receives
    sent: list[list[BaseMessage]] = []

    def handler(request: ModelRequest) -> ModelResponse:
        sent.append(list(request.messages))
        return ModelResponse(result=[answer])

    request = ModelRequest(
        model=model,
        messages=list(state["messages"]),
        system_message=system,
        tool_choice=None,
        tools=tools,
        response_format=None,
        state=dict(state),  # type: ignore[arg-type]
        runtime=Runtime(stream_writer=events.append),
    )
    counter = middleware.token_counter  # warm with what the middleware itself counted
    tokens_before = counter.count_request(_effective(middleware, state), system, tools, profile)
    response = middleware.wrap_model_call(request, handler)
    if isinstance(response, ExtendedModelResponse) and response.command is not None:
        _apply_update(state, dict(response.command.update or {}))
    view = sent[-1]
    return ReplayStep(
        position=position,
        tokens_before=tokens_before,
        tokens_sent=counter.count_request(view, system, tools, profile),
        events=[e for e in events if e.get("type") == CONTEXT_COMPRESSION],
        view=view,
    )


def _effective(middleware: ContextCompressionMiddleware, state: dict[str, Any]) -> list[BaseMessage]:
    return effective_messages(state["messages"], state.get(EVENT_KEY)).messages
