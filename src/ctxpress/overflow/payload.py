"""Chat-completions payload fixes for servers that reject a shape OpenAI itself accepts.

Plain dictionaries in, plain dictionaries out: no client library needed. `ctxpress.overflow.openai`
applies them inside `ChatOpenAI`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fill_null_tool_call_content"]


def fill_null_tool_call_content(payload: dict[str, Any]) -> dict[str, Any]:
    """Chat-completions payload with `content: ""` instead of `null` on assistant messages with tool calls.

    llama-cpp-python's server rejects the `null` form (which OpenAI itself sends and accepts) with
    HTTP 500. Returns a new payload; the input is not changed.
    """
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return payload
    fixed = [
        {**message, "content": ""}
        if isinstance(message, dict)
        and message.get("role") == "assistant"
        and message.get("content") is None
        and (message.get("tool_calls") or message.get("function_call"))
        else message
        for message in messages
    ]
    return {**payload, "messages": fixed}
