"""The effects the middleware's automatic flow asks for, and the driver that steps through them.

`ContextCompressionMiddleware._flow` is a generator: it yields an effect (call the main model, build
the L1 view, save the history and summarise, trim the kept tail) and receives its result. The sync
and async entry points carry the effects out differently (in order, or with the history write and
the summary call running concurrently); `FlowDriver` is what both use to step the generator, so the
flow itself is written once.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.messages import BaseMessage, ToolMessage

from ctxpress.summary.step import SummaryPlan


@dataclass(frozen=True)
class CallModel:
    request: ModelRequest


@dataclass(frozen=True)
class BuildL1View:
    messages: list[BaseMessage]


@dataclass(frozen=True)
class SaveAndSummarize:
    plan: SummaryPlan


@dataclass(frozen=True)
class TrimTail:
    view: list[BaseMessage]
    originals: dict[str, ToolMessage]  # by `graph_run.tool_result_key`
    budget: int  # the preview budget of a trimmed result (`overflow_trim.trim_budgets`)


Effect = CallModel | BuildL1View | SaveAndSummarize | TrimTail
Flow = Generator[Effect, Any, ModelResponse | ExtendedModelResponse]


class FlowDriver:
    """Steps a flow generator: feeds each effect's value (or error) back and keeps the result."""

    def __init__(self, flow: Flow) -> None:
        self._flow = flow
        self._value: Any = None
        self._error: BaseException | None = None
        self.result: ModelResponse | ExtendedModelResponse

    def next_effect(self) -> Effect | None:
        value, error = self._value, self._error
        self._value, self._error = None, None
        try:
            return self._flow.throw(error) if error is not None else self._flow.send(value)
        except StopIteration as done:
            self.result = done.value
            return None

    def resume(self, value: Any) -> None:
        self._value = value

    def fail(self, error: BaseException) -> None:
        self._error = error
