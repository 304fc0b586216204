"""Issue 44: the middleware is never the reason a conversation dies.

One regression test per defect found by trying ctxpress as a new user would; each failed before
its fix. Real `create_agent` graphs with scripted models and a real checkpointer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.deepagents_drop_in import DeepAgentsCompressionMiddleware
from ctxpress.summary.conflict import SummarizerConflictError
from ctxpress.summary.event import EVENT_KEY, is_summary_message
from ctxpress.summary.history import read_history
from ctxpress.tokens import count_request_tokens
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.conftest import assert_provider_valid
from tests.middleware.test_flow import THREAD, run_turn

HUGE_QUERY = "汉" * 100_000


def _empty_search(messages: Any) -> AIMessage:
    """The model searches the knowledge base with the user's whole message, then answers."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return tool_call("query_kb", {"query": last.text}, f"call-{len(messages)}")
    return AIMessage(content="没有找到相关结果。")


@tool("query_kb")
def empty_kb(query: str) -> str:
    """Search the knowledge base: no results, the query echoed (as the service's `query_kb` does)."""
    return json.dumps({"query": query, "total": 0, "results": []}, ensure_ascii=False)


def test_item1_a_search_result_without_records_is_compacted_and_the_next_turn_succeeds(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """S9 falls back to S10 for a result list with no records; the conversation goes on (issue 44.1)."""
    model = ScriptedChatModel(script=_empty_search)
    config = CompressionConfig(summary_threshold=4, summary_keep_messages=4)
    middleware = ContextCompressionMiddleware(config, workdir=workdir)
    agent = create_agent(model, [empty_kb], middleware=[middleware], checkpointer=checkpointer)
    run_turn(agent, HUGE_QUERY)
    run_turn(agent, "hello")
    state = agent.get_state(THREAD).values
    assert state["messages"][-1].content == "没有找到相关结果。"
    # The search result was offloaded whole (S8) and its preview is the generic one (S10).
    views = [m.text for request in model.requests for m in request if m.type == "tool"]
    large = [
        parse_offload_reference(text) for text in views if HUGE_QUERY[:1000] in text or "offloaded" in text
    ]
    assert large and all(reference is not None for reference in large)
    saved = {reference.path for reference in large if reference is not None}
    assert all(json.loads(workdir.read_bytes(path))["query"] == HUGE_QUERY for path in saved)


def _deepagents_thread(tmp_path: Path, checkpointer: Any, model: ScriptedChatModel) -> dict[str, Any]:
    """A thread that DeepAgents' own summariser summarised; returns the event it left."""
    from deepagents.backends import FilesystemBackend
    from deepagents.middleware.summarization import SummarizationMiddleware

    deepagents = SummarizationMiddleware(
        ScriptedChatModel(script=[AIMessage(content=f"deepagents summary {i}") for i in range(5)]),
        backend=FilesystemBackend(root_dir=tmp_path / "deepagents", virtual_mode=True),
        trigger=("messages", 6),
        keep=("messages", 2),
    )
    before = create_agent(model, [], middleware=[deepagents], checkpointer=checkpointer)
    for index in range(4):
        before.invoke({"messages": [HumanMessage(f"question {index}: " + "context " * 40)]}, THREAD)
    event: dict[str, Any] = before.get_state(THREAD).values[EVENT_KEY]
    assert event is not None and not is_summary_message(event["summary_message"])
    return event


def test_item3_a_thread_moved_from_deepagents_summariser_continues_through_ctxpress_summaries(
    tmp_path: Path, workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """S3, S15: the foreign event is adopted; ctxpress's next summary reads its summary and moves
    the cutoff on in the full state; every later request is provider-valid (issue 44 item 3)."""
    model = ScriptedChatModel(script=[AIMessage(content="answer " + "detail " * 40) for _ in range(30)])
    foreign = _deepagents_thread(tmp_path, checkpointer, model)
    summary_model = ScriptedChatModel(script=[AIMessage(content=f"ctxpress summary {i}") for i in range(10)])
    middleware = DeepAgentsCompressionMiddleware(
        CompressionConfig(summary_threshold=0.4, summary_keep_messages=2),
        workdir=workdir,
        summary_model=summary_model,
    )
    after = create_agent(model, [], middleware=[middleware], checkpointer=checkpointer)
    for index in range(4):
        after.invoke({"messages": [HumanMessage(f"later {index}: " + "context " * 40)]}, THREAD)
        assert_provider_valid(model.requests[-1])
    # The first ctxpress summary read the adopted one (its text is in the transcript it summarised).
    assert summary_model.requests and foreign["summary_message"].text in summary_model.requests[0][-1].text
    event = after.get_state(THREAD).values[EVENT_KEY]
    assert is_summary_message(event["summary_message"]) and event["cutoff_index"] > foreign["cutoff_index"]


def test_item3_a_foreign_summariser_active_outside_ctxpress_is_still_refused(
    tmp_path: Path, workdir: LocalWorkdir
) -> None:
    """S3: two summarisers active in one agent are refused, whichever wrote the state's event."""
    from deepagents.backends import FilesystemBackend
    from deepagents.middleware.summarization import SummarizationMiddleware

    model = ScriptedChatModel(script=[AIMessage(content="answer " + "detail " * 40) for _ in range(30)])
    deepagents = SummarizationMiddleware(
        ScriptedChatModel(script=[AIMessage(content=f"deepagents summary {i}") for i in range(5)]),
        backend=FilesystemBackend(root_dir=tmp_path / "deepagents", virtual_mode=True),
        trigger=("messages", 6),
        keep=("messages", 2),
    )
    ours = ContextCompressionMiddleware(CompressionConfig(summary_threshold=100), workdir=workdir)
    agent = create_agent(model, [], middleware=[deepagents, ours], checkpointer=InMemorySaver())
    with pytest.raises(SummarizerConflictError):
        for index in range(6):
            agent.invoke({"messages": [HumanMessage(f"question {index}: " + "context " * 40)]}, THREAD)


def test_item2_an_overflow_that_fewer_kept_messages_would_fix_is_fixed(workdir: LocalWorkdir) -> None:
    """S6, S14: after an overflow, the summary keeps fewer messages until the retry is smaller than
    what overflowed and fits (issue 44 item 2; before, only the threshold bounded the keep)."""
    model = ScriptedChatModel(script=[AIMessage(content="answer " + "detail " * 12) for _ in range(12)])
    summary_model = ScriptedChatModel(script=[AIMessage(content="summary")] * 12)
    config = CompressionConfig(summary_threshold=400 / 1024, summary_keep_messages=4)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    for index in range(3):
        agent.invoke({"messages": [HumanMessage(f"question {index}: " + "context " * 12)]}, THREAD)
    # The next request (~144 tokens) overflows; a summary with the question alone (~114) fits.
    model.context_window = 120
    agent.invoke({"messages": [HumanMessage("question 3: " + "context " * 12)]}, THREAD)
    assert count_request_tokens(model.requests[-1]) <= model.context_window
    assert agent.get_state(THREAD).values["messages"][-1].type == "ai"


def test_item2_when_nothing_smaller_fits_the_error_names_what_was_tried(workdir: LocalWorkdir) -> None:
    """S6: the documented error, only after every smaller request was tried, each named."""
    model = ScriptedChatModel(script=[AIMessage(content="answer " + "detail " * 40) for _ in range(12)])
    summary_model = ScriptedChatModel(script=[AIMessage(content="summary")] * 12)
    config = CompressionConfig(summary_threshold=100, summary_keep_messages=4)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    for index in range(3):
        agent.invoke({"messages": [HumanMessage(f"question {index}: " + "context " * 40)]}, THREAD)
    model.context_window = 40  # less than the new question alone
    with pytest.raises(ContextOverflowError, match=r"every smaller request was tried: .*a summary keeping"):
        agent.invoke({"messages": [HumanMessage("question 3: " + "context " * 40)]}, THREAD)
    model.context_window = None  # the conversation goes on once the model can take it
    agent.invoke({"messages": [HumanMessage("question 4")]}, THREAD)
    assert agent.get_state(THREAD).values["messages"][-1].type == "ai"


# --- containment: a rule that raises costs its own result, never the model call ---------------


def _kb_agent(workdir: LocalWorkdir, threshold: float = 1, keep: int = 2) -> tuple[Any, ScriptedChatModel]:
    from tests.middleware.conftest import build_agent, kb_call

    script = [kb_call(f"c{i}", i) if i % 2 == 0 else AIMessage(content=f"答案 {i}") for i in range(40)]
    model = ScriptedChatModel(script=script)
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要 W2378156 outputs/a.txt")] * 20)
    config = CompressionConfig(summary_threshold=threshold, summary_keep_messages=keep)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    return build_agent(model, middleware, InMemorySaver()), model


def _broken(*args: Any, **kwargs: Any) -> Any:
    raise IndexError("list index out of range")


@pytest.mark.parametrize(
    ("target", "rule"),
    [
        ("ctxpress.compaction.offload.retrieval_preview", "S9 retrieval preview"),
        ("ctxpress.compaction.offload.head_middle_tail_preview", "S10 text preview"),
        ("ctxpress.compaction.view.cut_long_arguments", "S7 tool-call arguments"),
        ("ctxpress.summary.step.references_section", "S14 references section"),
        ("ctxpress.summary.summarizer.render_messages", "S14 summary transcript"),
    ],
)
def test_a_rule_that_raises_falls_back_and_is_reported(
    workdir: LocalWorkdir, monkeypatch: pytest.MonkeyPatch, target: str, rule: str
) -> None:
    """Containment (issue 44): each rule behind one guard; its fallback is used, the event says
    `degraded` with the rule's name, and the conversation goes on."""
    monkeypatch.setattr(target, _broken)
    if rule == "S10 text preview":  # the search results take the generic preview
        monkeypatch.setattr("ctxpress.compaction.offload.is_retrieval_tool", lambda name: False)
    agent, model = _kb_agent(workdir)
    events = [event for turn in range(5) for event in run_turn(agent, f"第{turn}个问题：北京有哪些景点？")]
    assert agent.get_state(THREAD).values["messages"][-1].type == "ai"
    assert "failed" not in [event["status"] for event in events]
    degraded = [entry for event in events for entry in event.get("degraded", [])]
    if rule != "S7 tool-call arguments":  # the kb calls' arguments are short: that rule never runs
        assert any(entry.startswith(f"{rule}: IndexError") for entry in degraded), degraded
    for request in model.requests:  # offloaded results still name a file that holds them
        for message in request:
            reference = parse_offload_reference(message.text) if message.type == "tool" else None
            assert reference is None or workdir.exists(reference.path)


def test_when_the_compression_itself_fails_the_request_goes_out_as_it_is(
    workdir: LocalWorkdir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Containment of the flow: `failed` is emitted, the model gets the uncompressed request, the
    state keeps no half-made summary, and the next turn compresses again."""
    import ctxpress.middleware

    monkeypatch.setattr(ctxpress.middleware, "plan_summary", _broken)
    agent, _model = _kb_agent(workdir)
    events = [event for turn in range(3) for event in run_turn(agent, f"第{turn}个问题：北京有哪些景点？")]
    assert "failed" in [event["status"] for event in events]
    assert agent.get_state(THREAD).values.get(EVENT_KEY) is None
    monkeypatch.undo()
    events = run_turn(agent, "再问一次")
    assert any(event["status"] == "completed" and event["level"] == "l2" for event in events)


def test_the_models_own_error_is_not_contained(workdir: LocalWorkdir) -> None:
    """Only ctxpress's own failures are contained: the model's error reaches the caller."""
    agent, model = _kb_agent(workdir, threshold=100)
    model.script = [RuntimeError("provider down")]
    with pytest.raises(RuntimeError, match="provider down"):
        run_turn(agent, "你好")


def test_item2_a_summary_too_long_for_the_room_an_overflow_left_is_cut_to_fit(workdir: LocalWorkdir) -> None:
    """S6: the summary model's text is cut (head and tail, half or less each time) until the retry
    fits; the history file still holds every summarised message."""
    long_summary = "summary sentence with details. " * 150
    model = ScriptedChatModel(script=[AIMessage(content="answer " + "detail " * 40) for _ in range(12)])
    summary_model = ScriptedChatModel(script=[AIMessage(content=long_summary)] * 12)
    config = CompressionConfig(summary_threshold=100, summary_keep_messages=2)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    for index in range(3):
        agent.invoke({"messages": [HumanMessage(f"question {index}: " + "context " * 40)]}, THREAD)
    model.context_window = 250  # the question (~60) and a summary message fit; the whole summary does not
    agent.invoke({"messages": [HumanMessage("question 3: " + "context " * 40)]}, THREAD)
    assert count_request_tokens(model.requests[-1]) <= 250
    event = agent.get_state(THREAD).values[EVENT_KEY]
    assert len(event["summary_message"].text) < len(long_summary)
    _header, summarised = read_history(workdir, event["file_path"])
    assert summarised, "the summarised messages are in the history file"
