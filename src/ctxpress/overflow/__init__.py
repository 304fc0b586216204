"""Context-overflow errors of OpenAI-compatible servers as `ContextOverflowError` (spec S6).

classify     is_context_overflow, as_context_overflow: the wordings (docs/overflow-wordings.md)
guards       EmptyStreamError, guard_empty_stream: streams that end without saying anything
middleware   OverflowMappingMiddleware, raising_context_overflow, retry_unless_overflow
payload      fill_null_tool_call_content: llama-cpp-python rejects `content: null` with tool calls
openai       ChatOpenAINoNullContent (the `openai` extra; imported only when asked for)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxpress.overflow.classify import as_context_overflow, is_context_overflow
from ctxpress.overflow.guards import (
    EmptyStreamError,
    EmptyStreamOverflowError,
    aguard_empty_stream,
    guard_empty_stream,
    is_empty_stream_error,
)
from ctxpress.overflow.middleware import (
    OverflowMappingMiddleware,
    raising_context_overflow,
    retry_unless_overflow,
)
from ctxpress.overflow.payload import fill_null_tool_call_content

if TYPE_CHECKING:
    from ctxpress.overflow.openai import ChatOpenAINoNullContent as ChatOpenAINoNullContent

# `ChatOpenAINoNullContent` is left out on purpose: a star import must work without langchain-openai.
__all__ = [
    "EmptyStreamError",
    "EmptyStreamOverflowError",
    "OverflowMappingMiddleware",
    "aguard_empty_stream",
    "as_context_overflow",
    "fill_null_tool_call_content",
    "guard_empty_stream",
    "is_context_overflow",
    "is_empty_stream_error",
    "raising_context_overflow",
    "retry_unless_overflow",
]


def __getattr__(name: str) -> Any:
    # Only this name needs langchain-openai (the `openai` extra): import it when it is asked for.
    if name == "ChatOpenAINoNullContent":
        from ctxpress.overflow.openai import ChatOpenAINoNullContent

        return ChatOpenAINoNullContent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
