"""S30's verification list, through a real `create_agent` graph (scripted models, real checkpointers).

Oracles read the view the model received, the state, the workdir files and the events.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.markers import OFFLOAD_MARKER
from ctxpress.summary.event import SUMMARY_MARKER, is_summary_message
from ctxpress.summary.history import HISTORY_DIR, read_history
from ctxpress.tokens import count_request_tokens
from ctxpress.workdir import WorkdirWriteError, read_text
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import assert_provider_valid, build_agent, crosswoz_results, kb_call

THREAD = {"configurable": {"thread_id": "conv-1"}}


def run_turn(agent: Any, text: str, config: dict[str, Any] = THREAD) -> list[dict[str, Any]]:
    """One user turn; returns the custom (compression) events in order."""
    events = []
    for mode, payload in agent.stream(
        {"messages": [HumanMessage(content=text)]}, config, stream_mode=["custom", "updates"]
    ):
        if mode == "custom" and payload.get("type") == "context_compression":
            events.append(payload)
    return events


def kb_script(turns: int) -> list[AIMessage]:
    """Each turn: search the knowledge base, then answer."""
    script: list[AIMessage] = []
    for turn in range(turns):
        script.append(kb_call(f"call-{turn}", offset=turn * 3))
        script.append(AIMessage(content=f"第{turn}轮：故宫、颐和园都值得去。"))
    return script


def state_of(agent: Any) -> dict[str, Any]:
    return agent.get_state(THREAD).values


def test_s4_below_threshold_sends_view_unchanged_without_events(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    model = ScriptedChatModel(script=kb_script(1))
    summary_model = ScriptedChatModel()
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=100), workdir=workdir, summary_model=summary_model
    )
    agent = build_agent(model, middleware, checkpointer)
    events = run_turn(agent, "北京有哪些景点？")
    assert events == []
    last_request = model.requests[-1]
    state_messages = state_of(agent)["messages"]
    assert last_request[0].type == "system"
    assert [m.content for m in last_request[1:]] == [
        m.content for m in state_messages[: len(last_request) - 1]
    ]
    assert isinstance(last_request[-1], ToolMessage) and last_request[-1].content == crosswoz_results(40, 0)
    assert summary_model.requests == []
    assert workdir.list_files() == []


def test_s5_below_same_threshold_after_l1_calls_no_summary(workdir: LocalWorkdir, checkpointer: Any) -> None:
    config = CompressionConfig(summary_threshold=4, summary_tool_result_token_limit=300)
    full_result = crosswoz_results(40, 0)
    # The premise: the raw request is over the threshold.
    assert (
        count_request_tokens([ToolMessage(content=full_result, tool_call_id="x")]) >= config.threshold_tokens
    )
    model = ScriptedChatModel(script=kb_script(1))
    summary_model = ScriptedChatModel()
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = build_agent(model, middleware, checkpointer)
    events = run_turn(agent, "北京有哪些景点？")

    view = model.requests[-1]
    tool_view = next(m for m in view if isinstance(m, ToolMessage))
    assert tool_view.content.startswith(OFFLOAD_MARKER)
    assert count_request_tokens(view) < config.threshold_tokens
    assert summary_model.requests == []  # S5: no summary model call
    state = state_of(agent)
    assert state.get("_summarization_event") is None  # no state change
    stored = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert stored.content == full_result  # S2: the checkpoint keeps the full result
    [offloaded] = workdir.list_files("outputs/large_tool_results")
    assert offloaded.path in tool_view.content
    assert read_text(workdir, offloaded.path) == full_result
    assert [(e["status"], e["level"]) for e in events] == [("started", "l1"), ("completed", "l1")]
    assert events[1]["tokens_after"] < events[1]["tokens_before"]


def test_s9_structured_retrieval_preview_in_view(workdir: LocalWorkdir, checkpointer: Any) -> None:
    model = ScriptedChatModel(script=kb_script(1))
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=4), workdir=workdir, summary_model=ScriptedChatModel()
    )
    run_turn(build_agent(model, middleware, checkpointer), "北京有哪些景点？")
    tool_view = next(m for m in model.requests[-1] if isinstance(m, ToolMessage))
    text = tool_view.content
    assert "40 results" in text
    # Kept in the original order: ids and titles of the first results, with their scores.
    first, second = text.index("doc_id=attraction-0 "), text.index("doc_id=attraction-1 ")
    assert first < second
    assert "title=故宫" in text and "score=" in text and "left out of this preview" in text


def _l2_agent(
    workdir: Any, checkpointer: Any, turns: int, summary_model: ScriptedChatModel, keep: int = 4
) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(script=kb_script(turns))
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=1, summary_keep_messages=keep),
        workdir=workdir,
        summary_model=summary_model,
    )
    return build_agent(model, middleware, checkpointer), model


def test_s14_s15_entering_summary(workdir: LocalWorkdir, checkpointer: Any) -> None:
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要：用户在查询北京景点。")] * 5)
    agent, model = _l2_agent(workdir, checkpointer, 3, summary_model)
    all_events = [e for turn in range(3) for e in run_turn(agent, f"第{turn}个问题：北京有哪些景点？")]

    state = state_of(agent)
    event = state["_summarization_event"]
    assert event is not None and len(summary_model.requests) >= 1
    messages = state["messages"]
    cutoff = event["cutoff_index"]
    assert messages[cutoff].id == event["first_kept_id"]
    assert not isinstance(messages[cutoff], ToolMessage)  # the kept part starts at a clean edge
    # The history file holds exactly the summarised range.
    header, saved = read_history(workdir, event["file_path"])
    start, end = header["range"]
    assert end == cutoff and 0 <= start < end
    raw = [m for m in saved if not is_summary_message(m)]
    assert [m.id for m in raw] == [m.id for m in messages[start:cutoff]]
    # A second summary also carries the previous one forward.
    assert (start > 0) == any(is_summary_message(m) for m in saved)
    # Later requests: [summary, *messages[cutoff:]], provider-valid, system prompt from the request.
    last = model.requests[-1]
    assert is_summary_message(last[1]) and "摘要：用户在查询北京景点。" in last[1].content
    assert_provider_valid(last[1:])
    assert last[0].content.startswith("你是一个知识库助手")
    # The announced summary is the one in the state: same history file, same cutoff.
    l2 = [e for e in all_events if e["status"] == "completed" and e["level"] == "l2"]
    assert l2, "no completed L2 event was announced"
    assert (l2[-1]["file_path"], l2[-1]["cutoff_index"]) == (event["file_path"], cutoff)
    # The summary request carried the summarised messages through the prompt.
    summary_prompt = summary_model.requests[0][0].content
    assert "对话记录" in summary_prompt and "query_kb" in summary_prompt


class FailingHistoryWorkdir(LocalWorkdir):
    def write_bytes(self, path: str, data: bytes) -> str:
        if path.startswith("outputs/conversation_history/"):
            raise WorkdirWriteError(f"could not write {path}: No space left on device")
        return super().write_bytes(path, data)


def test_s27_history_write_failure_goes_on_without_file(tmp_path: Any, checkpointer: Any) -> None:
    workdir = FailingHistoryWorkdir(tmp_path / "wd")
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要内容")] * 5)
    agent, _model = _l2_agent(workdir, checkpointer, 3, summary_model)
    events = [e for turn in range(3) for e in run_turn(agent, f"问题{turn}")]
    event = state_of(agent)["_summarization_event"]
    assert event["file_path"] is None
    assert "could not be saved" in event["summary_message"].content
    completed = [e for e in events if e["status"] == "completed" and e["level"] == "l2"]
    assert completed and completed[0]["file_path"] is None and "history_error" in completed[0]
    assert isinstance(state_of(agent)["messages"][-1], AIMessage)  # the main call went on
    assert workdir.list_files("outputs/conversation_history") == []


def test_s27_summary_model_failure_puts_error_and_digest_in_view(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    summary_model = ScriptedChatModel(script=[RuntimeError("upstream 503")] * 5)
    agent, _model = _l2_agent(workdir, checkpointer, 3, summary_model)
    events = [e for turn in range(3) for e in run_turn(agent, f"问题{turn}：故宫开放时间？")]
    summary = state_of(agent)["_summarization_event"]["summary_message"].content
    assert "summary model failed" in summary and "upstream 503" in summary
    assert "query_kb" in summary and "故宫开放时间" in summary  # the deterministic digest
    assert any(e["status"] == "completed" and e.get("summary_error") for e in events)
    assert isinstance(state_of(agent)["messages"][-1], AIMessage)
    assert state_of(agent)["_summarization_event"]["file_path"]  # the history was still saved


def test_s15_three_successive_summaries_have_cumulative_cutoffs(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    summary_model = ScriptedChatModel(script=[AIMessage(content=f"第{i}份摘要") for i in range(20)])
    agent, _model = _l2_agent(workdir, checkpointer, 8, summary_model, keep=3)
    seen: list[dict[str, Any]] = []
    for turn in range(8):
        run_turn(agent, f"问题{turn}")
        event = state_of(agent).get("_summarization_event")
        if event and (not seen or seen[-1]["cutoff_index"] != event["cutoff_index"]):
            seen.append(event)
    assert len(seen) >= 3
    messages = state_of(agent)["messages"]
    previous_end = 0
    for event in seen:
        assert event["cutoff_index"] > previous_end  # cutoffs only move forward
        assert messages[event["cutoff_index"]].id == event["first_kept_id"]
        header, saved = read_history(workdir, event["file_path"])
        assert header["range"] == [previous_end, event["cutoff_index"]]
        raw = [m for m in saved if not is_summary_message(m)]
        assert [m.id for m in raw] == [m.id for m in messages[previous_end : event["cutoff_index"]]]
        previous_end = event["cutoff_index"]
    assert [e["summary_count"] for e in seen] == list(
        range(seen[0]["summary_count"], seen[0]["summary_count"] + len(seen))
    )


def test_s6_overflow_below_threshold_forces_summary(workdir: LocalWorkdir, checkpointer: Any) -> None:
    model = ScriptedChatModel(script=kb_script(2), context_window=3000)
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要")] * 5)
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=100, summary_keep_messages=2),
        workdir=workdir,
        summary_model=summary_model,
    )
    agent = build_agent(model, middleware, checkpointer)
    events = run_turn(agent, "北京有哪些景点？")
    # The overflowing request was not resent: the next request is smaller and fits.
    sizes = [count_request_tokens(r) for r in model.requests]
    assert any(size > 3000 for size in sizes)
    assert count_request_tokens(model.requests[-1]) <= 3000
    assert isinstance(state_of(agent)["messages"][-1], AIMessage)
    assert [(e["status"], e.get("reason")) for e in events] == [
        ("started", "context_overflow"),
        ("completed", "context_overflow"),
    ]
    assert len(summary_model.requests) == 1
    assert state_of(agent)["_summarization_event"]["file_path"]


def test_s6_overflow_above_threshold_after_l1(workdir: LocalWorkdir, checkpointer: Any) -> None:
    # L1 alone brings the request under the threshold, but the model's real window is smaller.
    window = 320  # below the L1 view's estimate (about 340), above the retry's
    config = CompressionConfig(summary_threshold=4, summary_keep_messages=2)
    model = ScriptedChatModel(script=kb_script(2), context_window=window)
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要")] * 5)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = build_agent(model, middleware, checkpointer)
    events = run_turn(agent, "北京有哪些景点？")
    sizes = [count_request_tokens(r) for r in model.requests]
    # The premise: the L1 view was under the threshold and still overflowed the window.
    assert any(window < size < config.threshold_tokens for size in sizes), sizes
    assert sizes[-1] <= window
    statuses = [e["status"] for e in events]
    assert statuses.count("started") == statuses.count("completed") + statuses.count("failed")
    # The overflow forced a summary (and trimmed the kept tool result), announced as such.
    completed = [e for e in events if e["status"] == "completed"]
    assert [(e["level"], e.get("reason")) for e in completed] == [("l2", "context_overflow")]
    assert completed[0]["trimmed_tool_results"] == 1
    assert len(summary_model.requests) == 1
    state = state_of(agent)
    # The summary enters the state only when the retry with it is smaller than what overflowed (S6);
    # the trimmed tool result always does.
    event = state.get("_summarization_event")
    assert event is None or workdir.exists(event["file_path"])
    kept_results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert kept_results and all(m.content.startswith(OFFLOAD_MARKER) for m in kept_results)
    assert isinstance(state["messages"][-1], AIMessage)


def test_s30_overflow_tail_trimming_updates_state_with_same_ids(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    # Two kb results of the current turn (no summary keeps less than its latest) whose L1 previews
    # overflow a tiny window.
    model = ScriptedChatModel(script=[AIMessage(content="好的")])
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要")] * 10)
    config = CompressionConfig(summary_threshold=100, summary_keep_messages=6)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=summary_model)
    agent = build_agent(model, middleware, checkpointer)
    run_turn(agent, "先不限制")  # no overflow yet: build the history
    model.context_window = 300
    model.script = [kb_call("a", 0), kb_call("b", 3), AIMessage(content="最终答案")]
    events = run_turn(agent, "再问一次")

    state = state_of(agent)
    tool_messages = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    trimmed = [m for m in tool_messages if m.content.startswith(OFFLOAD_MARKER)]
    assert trimmed, "the kept tool results should have been trimmed in the state"
    last_view = model.requests[-1]
    shown = {(m.id, m.content) for request in model.requests for m in request if isinstance(m, ToolMessage)}
    for message in trimmed:
        assert (message.id, message.content) in shown  # the checkpoint matches what the model saw
    assert count_request_tokens(last_view) <= 300
    assert any(e["status"] == "completed" and e.get("trimmed_tool_results") for e in events)
    # The trimmed content is recoverable from the workdir.
    for message in trimmed:
        path = message.content.split("is saved in the workdir at ", 1)[1].split(" ", 1)[0]
        assert read_text(workdir, path).startswith('{"results"')


def test_s6_overflow_with_nothing_left_to_cut_fails_with_event(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    model = ScriptedChatModel(script=[], context_window=5)
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=100), workdir=workdir, summary_model=ScriptedChatModel()
    )
    agent = build_agent(model, middleware, checkpointer)
    events: list[dict[str, Any]] = []
    with pytest.raises(Exception, match=r"does not fit|exceeds"):
        events.extend(run_turn(agent, "你好"))
    # The overflowing payload was sent once, never resent unchanged.
    contents = [tuple(m.content for m in r) for r in model.requests]
    assert len(contents) == len(set(contents))


def test_s21_summary_tokens_never_stream_as_messages(workdir: LocalWorkdir, checkpointer: Any) -> None:
    summary_model = ScriptedChatModel(script=[AIMessage(content="SUMMARY-TOKENS-should-not-stream " * 3)] * 5)
    agent, model = _l2_agent(workdir, checkpointer, 3, summary_model)
    model.script = [
        step if step.tool_calls else AIMessage(content=f"MAIN-ANSWER-{i}")
        for i, step in enumerate(model.script)
    ]
    streamed: list[str] = []
    for turn in range(3):
        for chunk, _metadata in agent.stream(
            {"messages": [HumanMessage(content=f"问题{turn}")]}, THREAD, stream_mode="messages"
        ):
            if isinstance(chunk.content, str):
                streamed.append(chunk.content)
    text = "".join(streamed)
    assert summary_model.requests, "the premise: the summary model was called"
    assert "MAIN-ANSWER" in text
    assert "SUMMARY" not in text


@pytest.mark.parametrize("use_async", [False, True])
async def test_s20_events_in_order_sync_and_async(workdir: LocalWorkdir, use_async: bool) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要")] * 10)
    agent, _model = _l2_agent(workdir, InMemorySaver(), 4, summary_model)
    events: list[dict[str, Any]] = []
    for turn in range(4):
        payload = {"messages": [HumanMessage(content=f"问题{turn}")]}
        if use_async:
            async for _mode, item in agent.astream(payload, THREAD, stream_mode=["custom"]):
                events.append(item)
        else:
            for _mode, item in agent.stream(payload, THREAD, stream_mode=["custom"]):
                events.append(item)
    compression = [e for e in events if e["type"] == "context_compression"]
    assert compression, "the premise: compression happened"
    # Strict alternation: started, then exactly one completed/failed, and so on.
    for started, finished in zip(compression[::2], compression[1::2], strict=True):
        assert started["status"] == "started"
        assert finished["status"] in ("completed", "failed")
    assert any(e.get("level") == "l2" and e["status"] == "completed" for e in compression)
    assert any(e.get("level") == "l1" and e["status"] == "completed" for e in compression)


class RendezvousWorkdir(LocalWorkdir):
    """The n-th history write waits (briefly) for the n-th summary call to start, and vice versa.

    Records who saw the other under way: both only when the two run at the same time.
    """

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.history_started: defaultdict[int, threading.Event] = defaultdict(threading.Event)
        self.summary_started: defaultdict[int, threading.Event] = defaultdict(threading.Event)
        self.writes = 0
        self.summaries = 0
        self.saw_the_other: list[tuple[str, int]] = []

    def write_bytes(self, path: str, data: bytes) -> str:
        if path.startswith(HISTORY_DIR):
            index, self.writes = self.writes, self.writes + 1
            self.history_started[index].set()
            if self.summary_started[index].wait(timeout=2):
                self.saw_the_other.append(("history write", index))
        return super().write_bytes(path, data)

    def summary(self, _messages: list[BaseMessage]) -> AIMessage:
        index, self.summaries = self.summaries, self.summaries + 1
        self.summary_started[index].set()
        if self.history_started[index].wait(timeout=2):
            self.saw_the_other.append(("summary call", index))
        return AIMessage(content=f"摘要{index}")


@pytest.mark.parametrize("use_async", [False, True])
async def test_async_path_writes_the_history_while_the_summary_model_runs(
    tmp_path: Path, use_async: bool
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    workdir = RendezvousWorkdir(tmp_path / "wd")
    summary_model = ScriptedChatModel(script=[workdir.summary] * 10)
    agent, _model = _l2_agent(workdir, InMemorySaver(), 3, summary_model)
    for turn in range(3):
        payload = {"messages": [HumanMessage(content=f"问题{turn}")]}
        if use_async:
            await agent.ainvoke(payload, THREAD)
        else:
            agent.invoke(payload, THREAD)
    assert workdir.writes >= 1 and workdir.summaries >= 1, "the premise: a summary happened"
    first = {who for who, index in workdir.saw_the_other if index == 0}
    # Async: the history write and the summary call overlap. Sync: one after the other, so the
    # write (first) waits for a summary that has not started yet.
    assert first == ({"history write", "summary call"} if use_async else {"summary call"})


def _view_has_summary(view: list[BaseMessage]) -> bool:
    return any(isinstance(m.content, str) and m.content.startswith(SUMMARY_MARKER) for m in view)


def test_s15_stale_event_is_detected_and_full_messages_used(
    workdir: LocalWorkdir, checkpointer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedChatModel(script=kb_script(1))
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=100), workdir=workdir, summary_model=ScriptedChatModel()
    )
    agent = build_agent(model, middleware, checkpointer)
    run_turn(agent, "第一个问题")
    stale = {
        "cutoff_index": 99,
        "summary_message": HumanMessage(content=f"{SUMMARY_MARKER} stale", id="s-1"),
        "file_path": None,
        "first_kept_id": "no-such-message",
    }
    agent.update_state(THREAD, {"_summarization_event": stale})
    model.script = [AIMessage(content="ok")]
    run_turn(agent, "第二个问题")
    view = model.requests[-1]
    assert not _view_has_summary(view)  # never "summary only"
    assert len(view) - 1 == len(state_of(agent)["messages"]) - 1  # every message, minus the new answer
    assert "stale _summarization_event" in caplog.text


def test_loop_guard_no_summary_of_the_summary(workdir: LocalWorkdir, checkpointer: Any) -> None:
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要")] * 10)
    model = ScriptedChatModel(script=kb_script(3))
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=1, summary_keep_messages=3),
        workdir=workdir,
        summary_model=summary_model,
    )
    agent = build_agent(model, middleware, checkpointer)
    for turn in range(3):
        run_turn(agent, f"问题{turn}")
    calls = len(summary_model.requests)
    assert calls >= 1
    assert state_of(agent)["_summarization_event"] is not None
    # Everything after the cutoff is within the keep window: another call must not summarise again.
    middleware.config = CompressionConfig(summary_threshold=1, summary_keep_messages=50)
    model.script = [AIMessage(content="再答")]
    run_turn(agent, "再问")
    assert len(summary_model.requests) == calls
