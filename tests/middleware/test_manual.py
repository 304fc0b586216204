"""Manual compression (S17–S19, S28) at the engine level: both halves or nothing."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.manual import ManualCompressionError, compress_now
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.history import read_history
from ctxpress.tokens import count_request_tokens
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import SYSTEM_PROMPT, build_agent, kb_call, query_kb
from tests.middleware.test_flow import FailingHistoryWorkdir

THREAD = {"configurable": {"thread_id": "manual-1"}}


def _conversation(workdir: Any, turns: int = 3) -> tuple[Any, ScriptedChatModel]:
    script: list[AIMessage] = []
    for turn in range(turns):
        script += [kb_call(f"m{turn}", turn), AIMessage(content=f"回答{turn}")]
    model = ScriptedChatModel(script=script)
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=100, summary_keep_messages=3), workdir=workdir
    )
    agent = build_agent(model, middleware, InMemorySaver())
    for turn in range(turns):
        agent.invoke({"messages": [HumanMessage(content=f"问题{turn}")]}, THREAD)
    return agent, model


async def _compress(agent: Any, workdir: Any, summary_model: Any, keep: int = 3) -> Any:
    values = agent.get_state(THREAD).values
    return await compress_now(
        values["messages"],
        values.get("_summarization_event"),
        config=CompressionConfig(summary_threshold=100, summary_keep_messages=keep),
        workdir=workdir,
        summary_model=summary_model,
        thread_id="manual-1",
    )


async def test_s19_manual_compression_event_applied_through_the_graph(tmp_path: Any) -> None:
    workdir = LocalWorkdir(tmp_path / "wd")
    agent, model = _conversation(workdir)
    summary_model = ScriptedChatModel(script=[AIMessage(content="手动摘要：用户问了三个问题。")])
    result = await _compress(agent, workdir, summary_model)
    assert result.compressed and result.tokens_after < result.tokens_before
    assert summary_model.requests, "the summary model was called"
    header, _saved = read_history(workdir, result.file_path)
    assert header["range"] == [0, result.cutoff_index]
    # S19: written through the compiled graph; the next model call sees the summary.
    agent.update_state(THREAD, {"_summarization_event": result.event})
    assert agent.get_state(THREAD).values["_summarization_event"]["cutoff_index"] == result.cutoff_index
    model.script = [AIMessage(content="好的")]
    agent.invoke({"messages": [HumanMessage(content="继续")]}, THREAD)
    first_after_system = model.requests[-1][1]
    assert is_summary_message(first_after_system) and "手动摘要" in first_after_system.content


async def test_s28_summary_failure_raises_and_publishes_nothing(tmp_path: Any) -> None:
    workdir = LocalWorkdir(tmp_path / "wd")
    agent, _ = _conversation(workdir)
    with pytest.raises(ManualCompressionError) as failure:
        await _compress(agent, workdir, ScriptedChatModel(script=[RuntimeError("model down")]))
    assert failure.value.part == "summary" and "model down" in str(failure.value)
    assert agent.get_state(THREAD).values.get("_summarization_event") is None
    # Summary first, history second: a failed summary leaves no file that no event names.
    assert workdir.list_files("outputs/conversation_history") == []


async def test_s28_history_failure_raises_and_publishes_nothing(tmp_path: Any) -> None:
    workdir = FailingHistoryWorkdir(tmp_path / "wd")
    agent, _ = _conversation(workdir)
    with pytest.raises(ManualCompressionError) as failure:
        await _compress(agent, workdir, ScriptedChatModel(script=[AIMessage(content="摘要")]))
    assert failure.value.part == "history"
    assert agent.get_state(THREAD).values.get("_summarization_event") is None


async def test_s28_empty_summary_counts_as_failure(tmp_path: Any) -> None:
    workdir = LocalWorkdir(tmp_path / "wd")
    agent, _ = _conversation(workdir)
    with pytest.raises(ManualCompressionError) as failure:
        await _compress(agent, workdir, ScriptedChatModel(script=[AIMessage(content="   ")]))
    assert failure.value.part == "summary"


async def test_nothing_to_compress_reports_why(tmp_path: Any) -> None:
    workdir = LocalWorkdir(tmp_path / "wd")
    agent, _ = _conversation(workdir, turns=1)  # 4 messages
    summary_model = ScriptedChatModel()
    result = await _compress(agent, workdir, summary_model, keep=10)
    assert not result.compressed and "summary_keep_messages" in (result.reason or "")
    assert summary_model.requests == []


async def test_s19_s22_manual_tokens_after_is_the_next_request_the_state_implies(tmp_path: Any) -> None:
    # The kept part holds a raw 25 K-token kb result: the L1 view the summary read is far smaller
    # than what the next model call starts from, and `tokens_after` must report the latter.
    workdir = LocalWorkdir(tmp_path / "wd")
    agent, model = _conversation(workdir)
    values = agent.get_state(THREAD).values
    result = await compress_now(
        values["messages"],
        None,
        config=CompressionConfig(summary_threshold=100, summary_keep_messages=3),
        workdir=workdir,
        summary_model=ScriptedChatModel(script=[AIMessage(content="手动摘要")]),
        system_message=SystemMessage(SYSTEM_PROMPT),
        tools=[query_kb],
    )
    assert result.compressed
    agent.update_state(THREAD, {"_summarization_event": result.event})
    model.script = [AIMessage(content="好的")]
    agent.invoke({"messages": [HumanMessage(content="继续")]}, THREAD)
    sent = model.requests[-1]
    assert is_summary_message(sent[1])
    # What the model then received, without the new question, is what `tokens_after` promised.
    assert result.tokens_after == count_request_tokens(sent[1:-1], sent[0], [query_kb])
    assert result.tokens_after > 20_000


@pytest.mark.parametrize("summarised_before", [False, True])
async def test_s14_manual_compression_over_the_threshold_summarises_into_the_keep_window(
    tmp_path: Any, summarised_before: bool
) -> None:
    # One huge user message and fewer messages than `summary_keep_messages`: over the threshold,
    # manual compression must still bring the next request under it.
    workdir = LocalWorkdir(tmp_path / "wd")
    config = CompressionConfig(summary_threshold=1, summary_keep_messages=10)
    huge = HumanMessage(content="北京的景点很多，" * 1500, id="huge")
    messages = [huge, AIMessage(content="好的", id="a1"), HumanMessage(content="然后呢？", id="h2")]
    event = None
    if summarised_before:
        first = await compress_now(
            [HumanMessage("你好", id="h0"), AIMessage("你好！", id="a0")],
            None,
            config=CompressionConfig(summary_threshold=1, summary_keep_messages=1),
            workdir=workdir,
            summary_model=ScriptedChatModel(script=[AIMessage(content="之前的摘要")]),
        )
        assert first.compressed
        messages = [HumanMessage("你好", id="h0"), AIMessage("你好！", id="a0"), *messages]
        event = first.event
    result = await compress_now(
        messages,
        event,
        config=config,
        workdir=workdir,
        summary_model=ScriptedChatModel(script=[AIMessage(content="用户发来一大段关于北京景点的文字。")]),
    )
    assert result.tokens_before >= config.threshold_tokens
    assert result.compressed, result.reason
    assert result.tokens_after < config.threshold_tokens
    assert result.event is not None and messages[result.cutoff_index].id in {"a1", "h2"}
