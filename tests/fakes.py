"""The scripted chat model of every test suite: the model is fake, the agent graph around it is real."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import ConfigDict, Field, PrivateAttr

from ctxpress.tokens import TokenCounter

#: A reply computed from the request's messages.
Script = Callable[[Sequence[BaseMessage]], AIMessage]
#: One step of a list script: a reply to return, an exception to raise, or a function of the request.
Step = AIMessage | BaseException | Script
CHUNK_CHARS = 6
#: What every reply reports as its usage (unless `report_usage=False`), so usage records are checkable.
REPORTED_USAGE: UsageMetadata = {
    "input_tokens": 100,
    "output_tokens": 10,
    "total_tokens": 110,
    "input_token_details": {"cache_read": 40},
}


class ScriptedChatModel(BaseChatModel):
    """A streaming, tool-calling chat model whose replies come from a script.

    `script` is a function of the request's messages (asked on every call), or a list of steps taken
    in order (an AIMessage, an exception to raise, or a function of the request); an exhausted list
    answers "done". Every request is recorded in `requests` and every call's kind ("generate" or
    "stream") in `calls`. A request above `context_window` tokens raises ContextOverflowError.
    Streaming yields the text in `chunk_chars` pieces, then the tool calls, then the usage.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: Script | list[Any] = Field(default_factory=list)
    provider: str = "fake"
    model_name: str = "scripted"
    #: When set, every call first waits for it (to hold a run in `running`).
    gate: threading.Event | None = None
    report_usage: bool = True
    context_window: int | None = None
    chunk_chars: int = CHUNK_CHARS
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    calls: list[str] = Field(default_factory=list)
    _token_counter: TokenCounter = PrivateAttr(default_factory=TokenCounter)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        return LangSmithParams(ls_provider=self.provider, ls_model_name=self.model_name, ls_model_type="chat")

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        """The reply to one request (subclasses answer differently)."""
        self.requests.append(list(messages))
        if self.context_window is not None:
            size = self._token_counter.count_request(messages)
            if size > self.context_window:
                raise ContextOverflowError(f"request of {size} tokens exceeds the context window")
        if callable(self.script):
            return self.script(messages)
        step = self.script.pop(0) if self.script else AIMessage(content="done")
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            step = step(messages)
        assert isinstance(step, AIMessage), f"a script step must give an AIMessage, not {step!r}"
        return step

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        if self.gate is not None:
            assert self.gate.wait(timeout=30), "the test never opened the gate"
        return self._next(messages)

    def _final_metadata(self) -> dict[str, Any]:
        return {
            "usage_metadata": dict(REPORTED_USAGE) if self.report_usage else None,
            "response_metadata": {"model_name": self.model_name},
        }

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append("generate")
        reply = self._reply(messages)
        metadata = self._final_metadata()
        message = reply.model_copy(
            update={
                "usage_metadata": metadata["usage_metadata"],
                "response_metadata": {**reply.response_metadata, **metadata["response_metadata"]},
            }
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self.calls.append("stream")
        reply = self._reply(messages)
        text = reply.text
        chunks = [
            AIMessageChunk(content=text[start : start + self.chunk_chars], id=reply.id)
            for start in range(0, len(text), self.chunk_chars)
        ]
        if reply.tool_calls:
            tool_calls = [
                tool_call_chunk(name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=index)
                for index, call in enumerate(reply.tool_calls)
            ]
            chunks.append(AIMessageChunk(content="", id=reply.id, tool_call_chunks=tool_calls))
        chunks.append(
            AIMessageChunk(content="", id=reply.id, chunk_position="last", **self._final_metadata())
        )
        # `BaseChatModel.stream` reports each chunk to the callbacks itself.
        for chunk in chunks:
            yield ChatGenerationChunk(message=chunk)


def tool_call(name: str, args: dict[str, Any], call_id: str, text: str = "") -> AIMessage:
    return AIMessage(
        content=text, tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )


class PacedChatModel(ScriptedChatModel):
    """`ScriptedChatModel` streaming with real timing: `chunk_seconds` between chunks and, when
    `pause_gate` is given, a stop after `pause_after_chunks` chunks until the gate opens (a run held
    mid-message, half of its text streamed)."""

    chunk_seconds: float = 0.0
    pause_after_chunks: int = 0
    pause_gate: threading.Event | None = None
    #: Set when the stream reaches the pause (the test then knows half the text went out).
    paused: threading.Event = Field(default_factory=threading.Event)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for index, chunk in enumerate(super()._stream(messages, stop, run_manager, **kwargs)):
            if self.pause_gate is not None and index == self.pause_after_chunks:
                self.paused.set()
                assert self.pause_gate.wait(timeout=60), "the test never opened the pause gate"
            if self.chunk_seconds:
                time.sleep(self.chunk_seconds)
            yield chunk
