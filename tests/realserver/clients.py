"""Shared client-side pieces of the real-server tests: the model client and the prompts."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from tests.realserver.conftest import RealServer

# About 700 tokens for stories260K's 512-token vocabulary: well over the 256-token context.
OVERFLOWING_PROMPT = "Once upon a time there was a little girl who liked to play in the park. " * 12
MAX_TOKENS = 16


def client_settings(server: RealServer, **overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "none",
        "model": server.model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "timeout": 30,
        "max_retries": 0,  # the SDK's own retries would hide what the server answered
    }
    return settings | overrides


def chat_model(server: RealServer, **overrides: Any) -> ChatOpenAI:
    return ChatOpenAI(**client_settings(server, **overrides))


def overflowing_history() -> dict[str, Any]:
    """Agent input whose first turn overflows; the last message alone fits."""
    return {
        "messages": [
            HumanMessage(OVERFLOWING_PROMPT),
            AIMessage("The girl played in the park all day."),
            HumanMessage("Once upon a time"),
        ]
    }


def tool_call_history() -> list[BaseMessage]:
    """An assistant turn with a tool call and empty text, which ChatOpenAI sends as `content: null`."""
    return [
        HumanMessage("What is the weather?"),
        AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "call_1"}]),
        ToolMessage("sunny", tool_call_id="call_1"),
    ]
