"""Deterministic models and tools for the service tests.

The agent graph is always the real `create_agent` graph; only the model's decisions are scripted.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from pydantic import ConfigDict, Field

Script = Callable[[Sequence[BaseMessage]], AIMessage]
CHUNK_CHARS = 6


class ScriptedChatModel(BaseChatModel):
    """A streaming, tool-calling chat model whose replies come from a script function."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: Script
    provider: str = "fake"
    model_name: str = "scripted"
    #: When set, every call first waits for it (to hold a run in `running`).
    gate: threading.Event | None = None
    report_usage: bool = True
    #: One entry per call: "stream" when the caller streamed, "generate" when it did not.
    calls: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        return LangSmithParams(ls_provider=self.provider, ls_model_name=self.model_name, ls_model_type="chat")

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append("generate")
        return generate_from_stream(self._chunks(messages))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self.calls.append("stream")
        yield from self._chunks(messages)

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[ChatGenerationChunk]:
        if self.gate is not None:
            assert self.gate.wait(timeout=30), "the test never opened the gate"
        reply = self.script(messages)
        text = reply.text
        for start in range(0, len(text), CHUNK_CHARS):
            yield ChatGenerationChunk(message=AIMessageChunk(content=text[start : start + CHUNK_CHARS]))
        if reply.tool_calls:
            chunks = [
                tool_call_chunk(name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=index)
                for index, call in enumerate(reply.tool_calls)
            ]
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=chunks))
        usage = (
            {
                "input_tokens": 100,
                "output_tokens": 10,
                "total_tokens": 110,
                "input_token_details": {"cache_read": 40},
            }
            if self.report_usage
            else None
        )
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=usage,  # type: ignore[arg-type]
                response_metadata={"model_name": self.model_name},
                chunk_position="last",
            )
        )


def new_call_id(prefix: str) -> str:
    return f"call_{prefix}_{uuid.uuid4().hex[:12]}"


def report_tool_script(messages: Sequence[BaseMessage]) -> AIMessage:
    """User message -> call `fetch_report`; `save <path>` -> call `write_file`; tool result -> answer."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        text = last.text
        if text.startswith("save "):
            path = text.removeprefix("save ").strip()
            args = {"path": path, "content": f"笔记：{path}\n"}
            return AIMessage("", tool_calls=[{"name": "write_file", "args": args, "id": new_call_id("save")}])
        return AIMessage(
            "我来查一下。",
            tool_calls=[{"name": "fetch_report", "args": {"topic": text}, "id": new_call_id("report")}],
        )
    if isinstance(last, ToolMessage):
        return AIMessage(f"结论：{last.text[:24]}")
    return AIMessage("（无事可做）")


def echo_script(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage(f"回声：{messages[-1].text}")


def ask_script(messages: Sequence[BaseMessage]) -> AIMessage:
    """`ask …` -> ask_user; the answer -> a reply quoting it; anything else -> echo."""
    last = messages[-1]
    if isinstance(last, HumanMessage) and last.text.startswith("ask "):
        question = last.text.removeprefix("ask ")
        return AIMessage(
            "", tool_calls=[{"name": "ask_user", "args": {"question": question}, "id": new_call_id("ask")}]
        )
    if isinstance(last, ToolMessage):
        return AIMessage(f"你的回答是：{last.text}")
    return echo_script(messages)


def report_text(topic: str) -> str:
    """A large, recognisable tool result (~3,000 characters of mixed Chinese and ASCII)."""
    lines = [
        f"第{index}段：关于“{topic}”的检索结果，编号 DOC-{index:04d}，score={index / 100:.2f}。"
        for index in range(80)
    ]
    return "\n".join(lines)


@tool
def fetch_report(topic: str) -> str:
    """Fetch a long report about a topic."""
    return report_text(topic)


SUMMARY_TOKEN = "SUMMARYTOKEN"


def summary_script(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage(" ".join(f"{SUMMARY_TOKEN}{index}" for index in range(12)))
