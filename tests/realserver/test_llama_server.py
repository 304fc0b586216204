"""Real HTTP against llama.cpp's llama-server: completions, usage, and its real context-overflow answer.

Observed answer for a prompt over `-c 256` (also for `stream: true`, before any event is sent):
HTTP 400 {"error": {"code": 400, "message": "request (N tokens) exceeds the available context size
(256 tokens), try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": N, "n_ctx": 256}}
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.model_retry import ModelRetryMiddleware
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI

from ctxpress.overflow import (
    OverflowMappingMiddleware,
    as_context_overflow,
    is_context_overflow,
    raising_context_overflow,
    retry_unless_overflow,
)
from ctxpress.overflow.openai import ChatOpenAINoNullContent
from tests.realserver.clients import (
    MAX_TOKENS,
    OVERFLOWING_PROMPT,
    chat_model,
    client_settings,
    overflowing_history,
    tool_call_history,
)
from tests.realserver.conftest import RealServer
from tests.test_overflow import FallbackRecorder


def test_short_completion_reports_usage(llama_server: RealServer) -> None:
    reply = chat_model(llama_server).invoke("Once upon a time")

    assert isinstance(reply.content, str) and reply.content.strip()
    usage = reply.usage_metadata
    assert usage is not None
    assert usage["input_tokens"] > 0
    assert 0 < usage["output_tokens"] <= MAX_TOKENS
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert reply.response_metadata["finish_reason"] in {"stop", "length"}


def test_streamed_completion_reports_usage_in_the_last_chunk(llama_server: RealServer) -> None:
    chunks = list(chat_model(llama_server, stream_usage=True).stream("Once upon a time"))

    assert sum(1 for chunk in chunks if chunk.text) >= 2  # really streamed, piece by piece
    with_usage = [chunk for chunk in chunks if chunk.usage_metadata]
    assert len(with_usage) == 1
    usage = with_usage[0].usage_metadata
    assert usage is not None
    assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= MAX_TOKENS
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert isinstance(merged, AIMessageChunk) and merged.text.strip()
    assert merged.response_metadata.get("finish_reason") in {"stop", "length"}


def test_overflow_is_a_real_http_400_exceed_context_size_error(llama_server: RealServer) -> None:
    client = openai.OpenAI(base_url=llama_server.base_url, api_key="none", max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=llama_server.model, messages=[{"role": "user", "content": OVERFLOWING_PROMPT}], max_tokens=8
        )

    error = caught.value
    assert error.status_code == 400
    assert isinstance(error.body, dict)
    assert error.body["type"] == "exceed_context_size_error"
    assert error.body["n_ctx"] == llama_server.context_size
    assert error.body["n_prompt_tokens"] > llama_server.context_size
    assert "exceeds the available context size" in error.body["message"]

    mapped = as_context_overflow(error)
    assert isinstance(mapped, ContextOverflowError) and mapped.__cause__ is error
    assert f"> {llama_server.context_size} context tokens" in str(mapped)


def test_chat_openai_overflow_is_recognised(llama_server: RealServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        chat_model(llama_server).invoke(OVERFLOWING_PROMPT)
    assert is_context_overflow(caught.value)

    with pytest.raises(ContextOverflowError) as mapped, raising_context_overflow():
        chat_model(llama_server).invoke(OVERFLOWING_PROMPT)
    assert isinstance(mapped.value.__cause__, openai.BadRequestError)


def test_streamed_overflow_fails_before_any_chunk_and_is_mapped(llama_server: RealServer) -> None:
    received: list[AIMessageChunk] = []
    with pytest.raises(ContextOverflowError) as caught, raising_context_overflow():
        for chunk in chat_model(llama_server, stream_usage=True).stream(OVERFLOWING_PROMPT):
            received.append(chunk)

    assert received == []
    cause = caught.value.__cause__
    assert isinstance(cause, openai.BadRequestError) and cause.status_code == 400


async def test_async_streamed_overflow_is_mapped(llama_server: RealServer) -> None:
    with pytest.raises(ContextOverflowError), raising_context_overflow():
        async for _chunk in chat_model(llama_server, stream_usage=True).astream(OVERFLOWING_PROMPT):
            pass


def agent_with_recommended_order(server: RealServer, recorder: FallbackRecorder) -> Any:
    retry = ModelRetryMiddleware(
        max_retries=2, initial_delay=0.0, jitter=False, retry_on=retry_unless_overflow
    )
    return create_agent(chat_model(server), middleware=[recorder, retry, OverflowMappingMiddleware()])


def test_agent_fallback_receives_context_overflow(llama_server: RealServer) -> None:
    recorder = FallbackRecorder()
    result = agent_with_recommended_order(llama_server, recorder).invoke(overflowing_history())

    assert recorder.seen == [ContextOverflowError]
    answer = result["messages"][-1]
    assert (
        isinstance(answer, AIMessage) and answer.text.strip()
    )  # the real model answered the smaller request


async def test_agent_fallback_receives_context_overflow_when_streaming_messages(
    llama_server: RealServer,
) -> None:
    recorder = FallbackRecorder()
    agent = agent_with_recommended_order(llama_server, recorder)

    streamed = [item async for item in agent.astream(overflowing_history(), stream_mode="messages")]

    assert recorder.seen == [ContextOverflowError]
    text = "".join(message.text for message, _meta in streamed if isinstance(message, AIMessageChunk))
    assert text.strip()


def test_no_null_content_variant_is_accepted(llama_server: RealServer) -> None:
    # llama-server itself takes `content: null` too; the variant must not break it.
    for model_type in (ChatOpenAI, ChatOpenAINoNullContent):
        reply = model_type(**client_settings(llama_server)).invoke(tool_call_history())
        assert reply.usage_metadata is not None and reply.usage_metadata["input_tokens"] > 0
