"""Approximate token counting (S12). PLACEHOLDER: being replaced by the character-class estimator."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

PROFILE_NAMES: tuple[str, ...] = ("default", "cl100k", "o200k", "qwen", "deepseek")


def estimate_tokens(text: str, profile: str = "default") -> int:
    return (len(text) + 3) // 4


def count_message_tokens(message: BaseMessage, profile: str = "default") -> int:
    return (
        4
        + estimate_tokens(str(message.content), profile)
        + estimate_tokens(json.dumps(getattr(message, "tool_calls", []) or [], default=str), profile)
    )


def count_tools_tokens(tools: Sequence[Any] | None, profile: str = "default") -> int:
    return sum(estimate_tokens(json.dumps(str(t)), profile) for t in tools or [])


def count_request_tokens(
    messages: Sequence[BaseMessage],
    system_message: SystemMessage | None = None,
    tools: Sequence[Any] | None = None,
    profile: str = "default",
) -> int:
    total = sum(count_message_tokens(m, profile) for m in messages)
    if system_message is not None:
        total += count_message_tokens(system_message, profile)
    return total + count_tools_tokens(tools, profile)
