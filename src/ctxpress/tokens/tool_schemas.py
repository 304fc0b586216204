"""Tokens of tool schemas, as the OpenAI-format JSON a provider receives, remembered per tool object.

Building a schema (``convert_to_openai_tool``) costs far more than estimating it, and the tool list
of an agent is the same on every model call, so each tool object's count is kept per profile. Tool
objects are treated as immutable, like LangChain's own per-instance schema memo.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxpress.tokens.estimate import estimate_tokens
from ctxpress.tokens.messages import provider_json

__all__ = ["TOOL_SCHEMA_CACHE_MAX_ENTRIES", "TOOL_SCHEMA_OVERHEAD_TOKENS", "ToolSchemaCache"]

# Framing around each tool schema in the tool list.
TOOL_SCHEMA_OVERHEAD_TOKENS: Final = 4
TOOL_SCHEMA_CACHE_MAX_ENTRIES: Final = 4096


def tool_schema_tokens(
    tool: BaseTool | Mapping[str, Any], profile: str, count_text: Callable[[str], int] | None = None
) -> int:
    """Tokens of one tool's schema (not cached); `count_text` counts the JSON (the estimate by default)."""
    schema = provider_json(convert_to_openai_tool(tool))
    return TOOL_SCHEMA_OVERHEAD_TOKENS + (
        count_text(schema) if count_text else estimate_tokens(schema, profile)
    )


class ToolSchemaCache:
    """Bounded (oldest tool first out) map from a tool object to its schema's tokens per profile."""

    def __init__(self, max_entries: int = TOOL_SCHEMA_CACHE_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        # tool object id -> (the tool itself, so the id cannot be reused while cached; profile -> tokens)
        self._entries: OrderedDict[int, tuple[Any, dict[str, int]]] = OrderedDict()
        self._lock = threading.Lock()
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def tokens(
        self,
        tool: BaseTool | Mapping[str, Any],
        profile: str,
        count_text: Callable[[str], int] | None = None,
    ) -> int:
        entry = self._entries.get(id(tool))
        if entry is not None and entry[0] is tool:
            tokens = entry[1].get(profile)
            if tokens is not None:
                return tokens
        tokens = tool_schema_tokens(tool, profile, count_text)
        with self._lock:
            self.misses += 1
            entry = self._entries.get(id(tool))
            if entry is None or entry[0] is not tool:
                entry = (tool, {})
                self._entries[id(tool)] = entry
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            entry[1][profile] = tokens
        return tokens
