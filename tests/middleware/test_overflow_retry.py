"""S6, S30: a retry after `ContextOverflowError` is always strictly smaller than what overflowed."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.runtime import Runtime

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.markers import OFFLOAD_MARKER
from ctxpress.tokens import count_request_tokens
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import build_agent, crosswoz_results, kb_call
from tests.middleware.test_flow import run_turn

SYSTEM = SystemMessage("你是一个知识库助手。")


def _retries_shrink(requests: list[list[BaseMessage]], window: int) -> None:
    """Every request sent after one that overflowed is strictly smaller than it."""
    sizes = [count_request_tokens(r) for r in requests]
    for before, after in pairwise(sizes):
        if before > window:
            assert after < before, f"retry of {after} tokens after an overflow of {before}: {sizes}"


def test_s6_retry_after_overflow_on_the_l1_path_is_strictly_smaller(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    # L1 alone gets under the threshold, the model overflows, and the summary is *longer* than
    # what it replaces: the forced retry must still be smaller than the overflowing L1 view.
    long_summary = AIMessage(content="摘要：" + "用户在查询北京景点，助手列出了故宫和颐和园。" * 60)
    summary_model = ScriptedChatModel(script=[long_summary] * 5)
    model = ScriptedChatModel(script=[kb_call("a", 0), AIMessage(content="第一轮答案")])
    config = CompressionConfig(summary_threshold=1.5, summary_keep_messages=3)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = build_agent(model, middleware, checkpointer)
    run_turn(agent, "北京有哪些景点？")
    # The next L1 view (this request plus an answer and a question) is just too large for the window.
    window = count_request_tokens(model.requests[-1]) + 9
    model.context_window = window
    model.script = [AIMessage(content="最终答案")]
    run_turn(agent, "再说说颐和园")
    assert len(summary_model.requests) >= 1
    _retries_shrink(model.requests, window)
    assert count_request_tokens(model.requests[-1]) <= window
    assert (
        agent.get_state({"configurable": {"thread_id": "conv-1"}}).values["messages"][-1].content
        == "最终答案"
    )


def _plain_request(messages: list[BaseMessage]) -> ModelRequest:
    return ModelRequest(
        model=ScriptedChatModel(),
        messages=messages,  # type: ignore[arg-type]
        system_message=SYSTEM,
        tool_choice=None,
        tools=[],
        response_format=None,
        state={"messages": messages},  # type: ignore[typeddict-item]
        runtime=Runtime(stream_writer=lambda _payload: None),
    )


@pytest.mark.parametrize("use_async", [False, True])
async def test_s30_messages_without_ids_are_still_trimmed(workdir: LocalWorkdir, use_async: bool) -> None:
    # A plain list (no ids, not from `create_agent`) whose kept tool results overflow the model.
    messages: list[BaseMessage] = [
        HumanMessage("北京有哪些景点？"),
        kb_call("a", 0),
        ToolMessage(crosswoz_results(40, 0), tool_call_id="a", name="query_kb"),
        kb_call("b", 3),
        ToolMessage(crosswoz_results(40, 3), tool_call_id="b", name="query_kb"),
        AIMessage("故宫、颐和园。"),
        HumanMessage("再说说"),
    ]
    assert all(m.id is None for m in messages)
    window = 500  # the L1 previews (about 700 tokens) overflow it, trimmed ones fit
    sent: list[list[BaseMessage]] = []

    def answer(request: ModelRequest) -> ModelResponse:
        sent.append(list(request.messages))
        if count_request_tokens(request.messages, SYSTEM) > window:
            raise ContextOverflowError("too long")
        return ModelResponse(result=[AIMessage("好的")])

    async def aanswer(request: ModelRequest) -> ModelResponse:
        return answer(request)

    config = CompressionConfig(summary_threshold=100, summary_keep_messages=6)
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要")] * 3)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    request = _plain_request(messages)
    if use_async:
        await middleware.awrap_model_call(request, aanswer)
    else:
        middleware.wrap_model_call(request, answer)
    assert count_request_tokens(sent[-1], SYSTEM) <= window
    assert any(isinstance(m, ToolMessage) and m.content.startswith(OFFLOAD_MARKER) for m in sent[-1])
    sizes = [count_request_tokens(r, SYSTEM) for r in sent]
    assert all(after < before for before, after in pairwise(sizes))


def test_s14_s6_a_huge_user_message_is_summarised_into_the_keep_window(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    # One user message far over the threshold and the model's window: its own turn cannot be
    # answered, but every later turn must be (the summary reaches into the keep window).
    model = ScriptedChatModel(script=[AIMessage(content="你好！")], context_window=3000)
    summary_model = ScriptedChatModel(script=[AIMessage(content="用户发来一大段北京景点介绍。")] * 5)
    config = CompressionConfig(summary_threshold=1, summary_keep_messages=10)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = build_agent(model, middleware, checkpointer)
    run_turn(agent, "你好")
    with pytest.raises(ContextOverflowError):
        run_turn(agent, "北京的景点很多，" * 1500)
    model.script = [AIMessage(content="好的，继续。")]
    run_turn(agent, "然后呢？")
    assert count_request_tokens(model.requests[-1]) <= 3000
    state = agent.get_state({"configurable": {"thread_id": "conv-1"}}).values
    assert state["messages"][-1].content == "好的，继续。"
    event = state["_summarization_event"]
    assert state["messages"][event["cutoff_index"]].content == "然后呢？"
