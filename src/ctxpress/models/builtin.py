"""The built-in deterministic chat model: what an agent answers with when no LLM is configured.

It is honest about what it is: every reply starts with `BUILTIN_LABEL`, and the service says so in
its logs, in `GET /api/agents` and in each run's `run_started` event. It understands no language.
What it does (the `EchoPolicy`):

- a user message is echoed back (extractively, bounded);
- `/ask <question>` calls the `ask_user` tool (human in the loop), `/tool <name> <json args>` calls
  any bound tool, so the whole tool path works offline;
- a tool result is answered with an extract of it.

A later issue replaces the policy (knowledge-base search, …): implement `ReplyPolicy` and pass it as
`BuiltinChatModel(policy=…)`; streaming, tool binding and usage reporting stay here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import ToolCall, tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from ctxpress.tokens import count_request_tokens, estimate_tokens

BUILTIN_MODEL_NAME = "ctxpress-builtin"
BUILTIN_PROVIDER = "ctxpress"
BUILTIN_LABEL = "【内置离线模型 · built-in offline model】"
BUILTIN_NOTICE = (
    "No language model is configured: this agent answers with ctxpress's deterministic built-in "
    "offline model (echo and extracts, no understanding). Configure `model` in the agents file."
)
ASK_COMMAND = "/ask"
TOOL_COMMAND = "/tool"
ECHO_LIMIT_CHARS = 500
TOOL_EXTRACT_CHARS = 800
STREAM_CHUNK_CHARS = 8


@dataclass(frozen=True)
class BuiltinReply:
    """What the model answers: text, tool calls, or both."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)


@runtime_checkable
class ReplyPolicy(Protocol):
    """Decides the reply from the conversation and the names of the tools bound for this call."""

    def reply(self, messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> BuiltinReply: ...


class EchoPolicy:
    """The offline policy described in the module docstring."""

    def reply(self, messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> BuiltinReply:
        last = messages[-1] if messages else None
        if isinstance(last, ToolMessage):
            return self._answer_tool_result(last)
        if isinstance(last, HumanMessage):
            return self._answer_user(last.text, messages, tool_names)
        return BuiltinReply(f"{BUILTIN_LABEL}（没有可回应的新消息 · nothing new to answer）")

    def _answer_user(
        self, text: str, messages: Sequence[BaseMessage], tool_names: Sequence[str]
    ) -> BuiltinReply:
        stripped = text.strip()
        if _is_command(stripped, ASK_COMMAND):
            question = stripped[len(ASK_COMMAND) :].strip()
            return self._call_tool("ask_user", {"question": question}, messages, tool_names)
        if _is_command(stripped, TOOL_COMMAND):
            name, _, raw_args = stripped[len(TOOL_COMMAND) :].strip().partition(" ")
            try:
                args = json.loads(raw_args) if raw_args.strip() else {}
            except json.JSONDecodeError as exc:
                return BuiltinReply(
                    f"{BUILTIN_LABEL}工具参数不是合法的 JSON（invalid JSON arguments）：{exc.msg}"
                )
            if not isinstance(args, dict):
                return BuiltinReply(f"{BUILTIN_LABEL}工具参数必须是 JSON 对象（arguments must be an object）")
            return self._call_tool(name, args, messages, tool_names)
        echoed = _bounded(stripped, ECHO_LIMIT_CHARS)
        return BuiltinReply(
            f"{BUILTIN_LABEL}尚未配置大语言模型，这是确定性的回声回复"
            f"（no LLM configured; deterministic echo）。\n你的消息：{echoed}"
        )

    @staticmethod
    def _call_tool(
        name: str, args: dict[str, Any], messages: Sequence[BaseMessage], tool_names: Sequence[str]
    ) -> BuiltinReply:
        if name not in tool_names:
            available = ", ".join(tool_names) or "（无 · none）"
            return BuiltinReply(
                f"{BUILTIN_LABEL}没有名为 {name!r} 的工具（no such tool）。可用工具：{available}"
            )
        return BuiltinReply("", [ToolCall(name=name, args=args, id=_stable_call_id(messages, name, args))])

    @staticmethod
    def _answer_tool_result(message: ToolMessage) -> BuiltinReply:
        extract = _bounded(message.text, TOOL_EXTRACT_CHARS)
        return BuiltinReply(
            f"{BUILTIN_LABEL}工具 {message.name or '?'} 的结果（摘录 · extract）：\n{extract}"
        )


class BuiltinChatModel(BaseChatModel):
    """Deterministic, offline `BaseChatModel` with tool calling, streaming and `usage_metadata`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    policy: ReplyPolicy = Field(default_factory=EchoPolicy)
    model_name: str = BUILTIN_MODEL_NAME

    @property
    def _llm_type(self) -> str:
        return BUILTIN_MODEL_NAME

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "policy": type(self.policy).__name__}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        return LangSmithParams(
            ls_provider=BUILTIN_PROVIDER, ls_model_name=self.model_name, ls_model_type="chat"
        )

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # One code path: a non-streaming call is the concatenated stream (sync and async alike).
        return generate_from_stream(self._stream(messages, stop, run_manager, **kwargs))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        tool_names = [spec["function"]["name"] for spec in kwargs.get("tools") or [] if "function" in spec]
        reply = self.policy.reply(messages, tool_names)
        for start in range(0, len(reply.text), STREAM_CHUNK_CHARS):
            yield ChatGenerationChunk(
                message=AIMessageChunk(content=reply.text[start : start + STREAM_CHUNK_CHARS])
            )
        if reply.tool_calls:
            chunks = [
                tool_call_chunk(
                    name=call["name"],
                    args=json.dumps(call["args"], ensure_ascii=False),
                    id=call["id"],
                    index=i,
                )
                for i, call in enumerate(reply.tool_calls)
            ]
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=chunks))
        input_tokens = count_request_tokens(messages)
        output_tokens = estimate_tokens(reply.text) + sum(
            estimate_tokens(json.dumps(call["args"], ensure_ascii=False)) for call in reply.tool_calls
        )
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata={
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "total_tokens": input_tokens + output_tokens,
                },
                response_metadata={"model_name": self.model_name, "model_provider": BUILTIN_PROVIDER},
                chunk_position="last",
            )
        )


def _is_command(text: str, command: str) -> bool:
    return text == command or text.startswith(command + " ") or text.startswith(command + "\n")


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"…（共 {len(text)} 字符 · {len(text)} chars）"


def _stable_call_id(messages: Sequence[BaseMessage], name: str, args: dict[str, Any]) -> str:
    """Same conversation, same call id: runs are reproducible."""
    digest = hashlib.sha256()
    digest.update(str(len(messages)).encode())
    for message in messages[-3:]:
        digest.update(message.text.encode("utf-8", "surrogatepass"))
    digest.update(name.encode())
    digest.update(json.dumps(args, sort_keys=True, ensure_ascii=False).encode())
    return "call_builtin_" + digest.hexdigest()[:16]
