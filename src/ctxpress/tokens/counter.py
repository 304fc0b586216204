"""`TokenCounter`: approximate tokens of whole requests, messages and tool schemas, with its caches.

A counter owns everything counting remembers: per profile an estimate cache (per content,
``estimate_cache``) and a whole-message memo (``message_memo``), and one tool-schema cache
(``tool_schemas``). Nothing is cached at module level: whoever counts the same thread repeatedly
holds a counter -- ``ContextCompressionMiddleware`` owns one, and two middlewares share one only when
given the same. The module functions (``count_request_tokens``, ...) count with a fresh counter per
call: the same numbers, nothing kept between calls.

``count_request(..., immutable_messages=True)`` -- what the middleware calls, since a LangGraph
state's messages are replaced and never edited in place -- remembers each whole message's count by
its id and finds it again by comparing the message's fields: identity checks for the same objects, a
deep equality in C after a checkpoint reload. Without that flag the count sees even a nested list or
dict edited in place. The result is the same count either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.tools import BaseTool

from ctxpress.tokens.estimate import profile_weights
from ctxpress.tokens.estimate_cache import CACHE_MAX_CHARS, CACHE_MAX_ENTRIES, EstimateCache
from ctxpress.tokens.exact import is_exact_profile, load_exact_counter
from ctxpress.tokens.message_memo import MESSAGE_MEMO_MAX_ENTRIES, MESSAGE_MEMO_MAX_TOKENS, MessageMemo
from ctxpress.tokens.messages import (
    count_new_messages,
    langchain_message_kinds,
    message_tokens,
    messages_tokens,
)
from ctxpress.tokens.tool_schemas import TOOL_SCHEMA_CACHE_MAX_ENTRIES, ToolSchemaCache

__all__ = [
    "REQUEST_OVERHEAD_TOKENS",
    "TokenCounter",
    "count_message_tokens",
    "count_request_tokens",
    "count_tools_tokens",
]

# Once per request: the primer of the reply ("<|im_start|>assistant\n" or the like).
REQUEST_OVERHEAD_TOKENS: Final = 3

Tools = Sequence[BaseTool | Mapping[str, Any]] | None


class TokenCounter:
    """Counts with caches of its own; safe to share between threads and middleware instances.

    The bounds are per profile: `max_entries` / `max_chars` of the estimate cache (the characters
    its keys keep alive), `memo_max_entries` / `memo_max_tokens` of the whole-message memo, and
    `tool_schema_max_entries` tool objects.
    """

    def __init__(
        self,
        *,
        max_entries: int = CACHE_MAX_ENTRIES,
        max_chars: int = CACHE_MAX_CHARS,
        memo_max_entries: int = MESSAGE_MEMO_MAX_ENTRIES,
        memo_max_tokens: int = MESSAGE_MEMO_MAX_TOKENS,
        tool_schema_max_entries: int = TOOL_SCHEMA_CACHE_MAX_ENTRIES,
    ) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.memo_max_entries = memo_max_entries
        self.memo_max_tokens = memo_max_tokens
        self.tool_schema_max_entries = tool_schema_max_entries
        self._lock = threading.Lock()
        self._profiles: dict[str, tuple[EstimateCache, MessageMemo]] = {}
        self._tools = ToolSchemaCache(tool_schema_max_entries)
        self._exact: dict[str, Callable[[str], int]] = {}  # loaded real tokenizers, by profile

    def _caches(self, profile: str) -> tuple[EstimateCache, MessageMemo]:
        caches = self._profiles.get(profile)
        if caches is None:
            weights = profile_weights(profile)  # refuses an unknown profile
            count_text = self._exact_counter(profile) if is_exact_profile(profile) else None
            with self._lock:
                caches = self._profiles.get(profile)
                if caches is None:
                    cache = EstimateCache(weights, self.max_entries, self.max_chars, count_text)
                    cache.message_kinds.update(langchain_message_kinds())
                    caches = (cache, MessageMemo(self.memo_max_entries, self.memo_max_tokens))
                    self._profiles[profile] = caches
        return caches

    def _exact_counter(self, profile: str) -> Callable[[str], int]:
        """The real tokenizer `profile` names, loaded once per counter and kept by `clear()`."""
        count_text = self._exact.get(profile)
        if count_text is None:  # loaded outside the lock: it may take a second
            count_text = self._exact.setdefault(profile, load_exact_counter(profile))
        return count_text

    def count_request(
        self,
        messages: Sequence[BaseMessage],
        system_message: SystemMessage | None = None,
        tools: Tools = None,
        profile: str = "default",
        *,
        immutable_messages: bool = False,
    ) -> int:
        """Approximate tokens of a whole model request: messages, system message, tool schemas and
        a small per-request constant.

        Warm (messages seen before) this is a dict lookup per message plus, for AI messages with
        tool calls, one `marshal.dumps` per call; with `immutable_messages=True` (the caller's
        promise that no message is edited in place between two counts, as in a LangGraph state) a
        few identity checks per message (see the module docstring).
        """
        cache, memo = self._caches(profile)
        if immutable_messages:
            total = memo.total(messages, count_new_messages, cache)
        else:
            total = messages_tokens(messages, cache)
        if system_message is not None:
            total += message_tokens(system_message, cache)
        return REQUEST_OVERHEAD_TOKENS + total + self.count_tools(tools, profile)

    def count_message(self, message: BaseMessage, profile: str = "default") -> int:
        """Approximate tokens of one message: overhead, content, tool calls, `name`, `tool_call_id`."""
        return message_tokens(message, self._caches(profile)[0])

    def count_messages(self, messages: Sequence[BaseMessage], profile: str = "default") -> int:
        """The sum of `count_message` over `messages` (no per-request constant)."""
        return messages_tokens(messages, self._caches(profile)[0])

    def count_tools(self, tools: Tools, profile: str = "default") -> int:
        """Approximate tokens of the tool schemas, as the OpenAI-format JSON a provider receives."""
        if not tools:
            return 0
        count_text = self._caches(profile)[0].count_text  # refuses an unknown profile
        return sum(self._tools.tokens(tool, profile, count_text) for tool in tools)

    def clear(self) -> None:
        """Forget every count (benchmarks of the cold path, tests)."""
        with self._lock:
            self._profiles = {}
            self._tools = ToolSchemaCache(self.tool_schema_max_entries)

    def cache_info(self, profile: str = "default") -> dict[str, int]:
        """Entries, characters held, bounds and misses of one profile's caches, and of tool schemas."""
        cache, memo = self._caches(profile)
        return {
            "entries": len(cache.young) + len(cache.old),
            "chars": cache.young_chars + cache.old_chars,
            "max_entries": cache.max_entries,
            "max_chars": cache.max_chars,
            "misses": cache.misses,
            "flat_calls": len(cache.flat_calls),
            "flat_calls_chars": cache.flat_calls_chars,
            "messages": len(memo),
            "message_misses": memo.misses,
            "tool_schemas": len(self._tools),
            "tool_schema_misses": self._tools.misses,
        }


def count_request_tokens(
    messages: Sequence[BaseMessage],
    system_message: SystemMessage | None = None,
    tools: Tools = None,
    profile: str = "default",
    *,
    immutable_messages: bool = False,
) -> int:
    """`TokenCounter.count_request` with a fresh counter: nothing is remembered between calls. To count
    the same messages repeatedly, hold a `TokenCounter` (the middleware owns one)."""
    counter = TokenCounter()
    return counter.count_request(
        messages, system_message, tools, profile, immutable_messages=immutable_messages
    )


def count_message_tokens(message: BaseMessage, profile: str = "default") -> int:
    """`TokenCounter.count_message` with a fresh counter (nothing remembered between calls)."""
    return TokenCounter().count_message(message, profile)


def count_tools_tokens(tools: Tools, profile: str = "default") -> int:
    """`TokenCounter.count_tools` with a fresh counter (nothing remembered between calls)."""
    return TokenCounter().count_tools(tools, profile)
