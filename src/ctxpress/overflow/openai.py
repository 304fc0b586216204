"""`ChatOpenAINoNullContent`: a `ChatOpenAI` for llama-cpp-python's server (needs the `openai` extra).

The library's own install has no `langchain-openai`; `ctxpress.overflow` imports this module only
when `ChatOpenAINoNullContent` is asked for.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import LanguageModelInput

from ctxpress.overflow.payload import fill_null_tool_call_content

try:
    from langchain_openai import ChatOpenAI
except ImportError as missing:
    raise ImportError(
        "ctxpress.overflow.ChatOpenAINoNullContent needs langchain-openai: pip install 'ctxpress[openai]'"
    ) from missing

__all__ = ["ChatOpenAINoNullContent"]


class ChatOpenAINoNullContent(ChatOpenAI):
    """`ChatOpenAI` that never sends `content: null` next to tool calls (see `fill_null_tool_call_content`).

    Why a model subclass and not a middleware: a middleware can only change LangChain messages, and
    `ChatOpenAI` itself serialises an empty `content` with tool calls as `null`.
    """

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        return fill_null_tool_call_content(super()._get_request_payload(input_, stop=stop, **kwargs))
