"""What a reply policy of the built-in model returns, and how the model labels itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from langchain_core.messages import BaseMessage
from langchain_core.messages.tool import ToolCall

BUILTIN_MODEL_NAME = "ctxpress-builtin"
BUILTIN_PROVIDER = "ctxpress"
#: Every text reply of the built-in model starts with this label.
BUILTIN_LABEL = "【内置离线模型 · built-in offline model】"
BUILTIN_NOTICE = (
    "No language model is configured: this agent answers with ctxpress's deterministic built-in offline "
    "model (rules and quoted extracts: it searches the knowledge base, reads and writes workdir files and "
    "asks you, but understands nothing). Configure `model` in an agents file to use a real model."
)


@dataclass(frozen=True)
class BuiltinReply:
    """What the model answers: text, tool calls, or both."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)


@runtime_checkable
class ReplyPolicy(Protocol):
    """Decides the reply from the conversation and the names of the tools bound for this call."""

    def reply(self, messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> BuiltinReply: ...
