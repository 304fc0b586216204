"""Real HTTP against llama-cpp-python's server: `context_length_exceeded` and its two quirks.

Observed answers (stories260K, --n_ctx 256):
- overflow: HTTP 400 {"error": {"message": "This model's maximum context length is 256 tokens. However,
  you requested N tokens (M in the messages, 16 in the completion). Please reduce the length of the
  messages or completion.", "type": "invalid_request_error", "param": "messages",
  "code": "context_length_exceeded"}}
- the same prompt with `stream: true`: HTTP 200, `text/event-stream`, and an empty body (not even
  `data: [DONE]`);
- an assistant message with `content: null` and `tool_calls`: HTTP 500 (its request validation wants
  a string), while `content: ""` is answered normally;
- `stream_options.include_usage` is ignored: no usage chunk;
- `max_completion_tokens` (what langchain-openai sends for `max_tokens`) is ignored, so the tests pass
  `max_tokens` through `extra_body`;
- after the empty overflow stream it drops the connection, so a client that reuses pooled
  keep-alive connections sees the *next* request fail with "Server disconnected".
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.model_retry import ModelRetryMiddleware
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI

from ctxpress.overflow import (
    EmptyStreamError,
    EmptyStreamOverflowError,
    OverflowMappingMiddleware,
    is_context_overflow,
    raising_context_overflow,
    retry_unless_overflow,
)
from ctxpress.overflow.openai import ChatOpenAINoNullContent
from tests.realserver.clients import (
    MAX_TOKENS,
    OVERFLOWING_PROMPT,
    client_settings,
    overflowing_history,
    tool_call_history,
)
from tests.realserver.conftest import RealServer
from tests.test_overflow import FallbackRecorder


def python_server_settings(server: RealServer, **overrides: Any) -> dict[str, Any]:
    # No keep-alive: after the empty overflow stream the server drops the connection, and a pooled
    # connection would fail the next, unrelated request with "Server disconnected".
    return client_settings(
        server, extra_body={"max_tokens": MAX_TOKENS}, default_headers={"Connection": "close"}, **overrides
    )


def chat_model(server: RealServer, **overrides: Any) -> ChatOpenAI:
    return ChatOpenAI(**python_server_settings(server, **overrides))


def test_short_completion_reports_usage(llama_cpp_python_server: RealServer) -> None:
    reply = chat_model(llama_cpp_python_server).invoke("Once upon a time")

    usage = reply.usage_metadata
    assert usage is not None
    assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= MAX_TOKENS
    assert reply.response_metadata["finish_reason"] in {"stop", "length"}


def test_overflow_is_context_length_exceeded(llama_cpp_python_server: RealServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        chat_model(llama_cpp_python_server).invoke(OVERFLOWING_PROMPT)

    error = caught.value
    assert error.status_code == 400 and error.code == "context_length_exceeded"
    assert "maximum context length is 256 tokens" in error.message
    # langchain-openai looks for "context_length_exceeded" in str(error), but openai 3.x puts only
    # the message there, so even this code arrives unmapped; we read the body instead.
    assert is_context_overflow(error)
    with pytest.raises(ContextOverflowError), raising_context_overflow():
        chat_model(llama_cpp_python_server).invoke(OVERFLOWING_PROMPT)


def post_streamed_overflow(server: RealServer) -> httpx.Response:
    payload = {
        "model": server.model,
        "stream": True,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": OVERFLOWING_PROMPT}],
    }
    return httpx.post(f"{server.base_url}/chat/completions", json=payload, timeout=30)


def test_streamed_overflow_is_an_empty_http_200(llama_cpp_python_server: RealServer) -> None:
    response = post_streamed_overflow(llama_cpp_python_server)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content.strip() == b""


def test_streamed_overflow_becomes_a_clear_error(llama_cpp_python_server: RealServer) -> None:
    model = chat_model(llama_cpp_python_server, stream_usage=True)

    with pytest.raises(ValueError, match="No generation chunks"):  # what langchain-core says on its own
        list(model.stream(OVERFLOWING_PROMPT))
    with pytest.raises(EmptyStreamError) as caught, raising_context_overflow():
        list(model.stream(OVERFLOWING_PROMPT))
    assert not isinstance(caught.value, ContextOverflowError)  # ambiguous: not an overflow by default
    with pytest.raises(EmptyStreamOverflowError), raising_context_overflow(empty_stream_as_overflow=True):
        list(model.stream(OVERFLOWING_PROMPT))


def build_agent(server: RealServer, recorder: FallbackRecorder, mapping: OverflowMappingMiddleware) -> Any:
    retry = ModelRetryMiddleware(
        max_retries=2, initial_delay=0.0, jitter=False, retry_on=retry_unless_overflow
    )
    return create_agent(chat_model(server), middleware=[recorder, retry, mapping])


def streamed_text(agent: Any) -> str:
    streamed = agent.stream(overflowing_history(), stream_mode="messages")
    return "".join(message.text for message, _meta in streamed if isinstance(message, AIMessageChunk))


def test_agent_streaming_empty_overflow_is_an_empty_stream_error_by_default(
    llama_cpp_python_server: RealServer,
) -> None:
    recorder = FallbackRecorder()
    agent = build_agent(llama_cpp_python_server, recorder, OverflowMappingMiddleware())

    with pytest.raises(EmptyStreamError):
        streamed_text(agent)
    assert recorder.seen == [EmptyStreamError]


def test_agent_streaming_empty_overflow_reaches_the_fallback_when_declared_an_overflow(
    llama_cpp_python_server: RealServer,
) -> None:
    recorder = FallbackRecorder()
    agent = build_agent(
        llama_cpp_python_server, recorder, OverflowMappingMiddleware(empty_stream_as_overflow=True)
    )

    text = streamed_text(agent)

    assert recorder.seen == [EmptyStreamOverflowError]
    assert text.strip()  # the smaller request was streamed for real


def test_null_content_with_tool_calls_is_a_500_and_the_variant_avoids_it(
    llama_cpp_python_server: RealServer,
) -> None:
    settings = python_server_settings(llama_cpp_python_server)
    with pytest.raises(openai.InternalServerError) as caught:
        ChatOpenAI(**settings).invoke(tool_call_history())
    assert caught.value.status_code == 500

    reply = ChatOpenAINoNullContent(**settings).invoke(tool_call_history())
    assert isinstance(reply, AIMessage)
    assert reply.usage_metadata is not None and reply.usage_metadata["input_tokens"] > 0
