"""Scripted chat models for tests: the model is fake, the agent graph around it is real."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field, PrivateAttr

from ctxpress.tokens import TokenCounter

Step = AIMessage | BaseException | Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Answers from a script, records every request, overflows above `context_window` tokens.

    A step is an AIMessage to return, an exception to raise, or a function of the request's
    messages. When the script runs out it answers "done". Streaming yields the answer in chunks.
    """

    script: list[Any] = Field(default_factory=list)
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    context_window: int | None = None
    chunk_chars: int = 8
    _token_counter: TokenCounter = PrivateAttr(default_factory=TokenCounter)

    @property
    def _llm_type(self) -> str:
        return "scripted-test-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        self.requests.append(list(messages))
        if self.context_window is not None:
            size = self._token_counter.count_request(messages)
            if size > self.context_window:
                raise ContextOverflowError(f"request of {size} tokens exceeds the context window")
        step = self.script.pop(0) if self.script else AIMessage(content="done")
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            step = step(messages)
        return step

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self._next(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._next(messages)
        text = message.content if isinstance(message.content, str) else ""
        pieces = [text[i : i + self.chunk_chars] for i in range(0, len(text), self.chunk_chars)] or [""]
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            chunk = AIMessageChunk(
                content=piece,
                id=message.id,
                tool_call_chunks=[
                    {
                        "name": c["name"],
                        "args": __import__("json").dumps(c["args"]),
                        "id": c["id"],
                        "index": i,
                    }
                    for i, c in enumerate(message.tool_calls)
                ]
                if last
                else [],
            )
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=ChatGenerationChunk(message=chunk))
            yield ChatGenerationChunk(message=chunk)


def tool_call(name: str, args: dict[str, Any], call_id: str, text: str = "") -> AIMessage:
    return AIMessage(
        content=text, tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )
