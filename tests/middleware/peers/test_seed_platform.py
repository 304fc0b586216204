"""Ports of the seed platform's summary-middleware tests (xerrors/Yuxi,
backend/test/unit/middlewares/test_summary_middleware.py and
backend/test/unit/agents/test_summary_graph_config.py).

The seed platform wraps DeepAgents' summarisation with an L1 step (large tool results saved under
the workdir, `write_file` arguments cut in the view) and compression events; the spec was written
from it. Each test restates one scenario against ctxpress through a real `create_agent` graph;
"Intended difference" marks where the spec decides otherwise (the README lists them).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata

from ctxpress import CompressionConfig
from ctxpress.compaction.markers import ARGUMENT_MARKER, OFFLOAD_MARKER, parse_offload_reference
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.history import read_history
from ctxpress.workdir import read_text
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.peers.conftest import (
    LARGE_RESULT,
    answers,
    config_for,
    make_agent,
    question,
    view_messages,
)

PEER_KB_RESULT = "BEGIN\n" + "raw result payload\n" * 200 + "END"


def _kb_script(result_turns: int = 1, extra: int = 10) -> list[Any]:
    script: list[Any] = []
    for turn in range(result_turns):
        script += [
            tool_call("search", {"query": f"project files {turn}"}, f"call-{turn}"),
            AIMessage("资料已整理"),
        ]
    return [*script, *answers(extra)]


class _HeavyUsageModel(ScriptedChatModel):
    def _final_metadata(self) -> dict[str, Any]:
        usage: UsageMetadata = {"input_tokens": 200_000, "output_tokens": 100, "total_tokens": 200_100}
        return {"usage_metadata": usage, "response_metadata": {"model_provider": "openai"}}


def _summarised_after_results(tmp_path: Path) -> Any:
    """Search-and-answer turns until a summary covers at least one saved search result."""
    agent = make_agent(tmp_path, config_for(900, keep=3), script=_kb_script(result_turns=4))
    for index in range(4):
        agent.turn(f"question {index}")
        if agent.event() is not None:
            return agent
    raise AssertionError("the premise: a summary within four turns")


def test_provider_reported_usage_is_not_the_trigger(tmp_path: Path) -> None:
    """Ports `test_wrap_model_call_ignores_provider_reported_usage_for_token_trigger`. S12, S26: the
    approximate count decides; a reply reporting 200,000 input tokens changes nothing."""
    agent = make_agent(
        tmp_path, config_for(1_000, keep=1), model=_HeavyUsageModel(script=answers(3)), tools=[]
    )
    events = agent.turn("short user turn") + agent.turn("next short turn")
    assert events == [] and agent.summary_model.requests == [] and agent.workdir.list_files() == []
    assert [m.id for m in view_messages(agent.last_request())] == [m.id for m in agent.messages()[:-1]]


def test_custom_summary_prompt_reaches_the_summary_model(tmp_path: Path) -> None:
    """Ports `test_create_summary_middleware_passes_custom_summary_prompt`. Configuration table:
    the custom prompt, then the older messages in place of `{messages}`."""
    prompt = "CUSTOM SUMMARY PROMPT\n用户要求和偏好必须记录\n{messages}"
    agent = make_agent(tmp_path, config_for(300, keep=2, summary_prompt=prompt), script=answers(20), tools=[])
    for index in range(6):
        agent.turn(question(index))
        if agent.summary_model.requests:
            break
    sent = agent.summary_model.requests[0][0].text
    assert sent.startswith("CUSTOM SUMMARY PROMPT\n用户要求和偏好必须记录\n")
    assert "question 0" in sent and "answer 0" in sent


def test_l1_only_offloads_in_the_view_and_leaves_the_state(tmp_path: Path) -> None:
    """Ports `test_wrap_model_call_offloads_large_tool_results[l1_only_without_state_mutation]` and
    `test_awrap_model_call_emits_completed_for_l1_without_summary`. S2, S5, S8, S11, S20: the large
    result is saved under `outputs/large_tool_results/<tool>-<hash>.txt`, the view keeps its path
    and a preview, no summary, no history file, the state keeps the result whole; events are
    started/completed at L1."""
    agent = make_agent(tmp_path, config_for(1_200, keep=3), script=_kb_script())
    events = agent.turn("查资料")
    assert [(e["status"], e["level"]) for e in events] == [("started", "l1"), ("completed", "l1")]
    tool_view = next(m for m in view_messages(agent.last_request()) if isinstance(m, ToolMessage))
    reference = parse_offload_reference(tool_view.text)
    assert tool_view.text.startswith(OFFLOAD_MARKER) and reference is not None
    digest = hashlib.sha256(LARGE_RESULT.encode()).hexdigest()
    assert reference.path.startswith("outputs/large_tool_results/search-") and digest.startswith(
        reference.sha256[:16]
    )
    assert read_text(agent.workdir, reference.path) == LARGE_RESULT
    assert "BEGIN" in tool_view.text and len(tool_view.text) < len(LARGE_RESULT)
    stored = next(m for m in agent.messages() if isinstance(m, ToolMessage))
    assert stored.text == LARGE_RESULT
    assert agent.summary_model.requests == [] and agent.history_files() == [] and agent.event() is None


def test_the_summary_reads_offloaded_previews_and_the_kept_view_is_raw(tmp_path: Path) -> None:
    """Ports `test_wrap_model_call_offloads_large_tool_results[l2_summary_offloads_tool_results_outside_keep_window]`
    and `test_create_summary_uses_sanitized_messages`. S5, S8, S14: when L1 is not enough, the
    summary model reads the L1 view (the saved result's path and preview, not the raw payload
    whole), and a result saved to a file is named in the history file's header."""
    agent = _summarised_after_results(tmp_path)
    event = agent.event()
    assert event is not None
    prompt = agent.summary_model.requests[0][0].text
    assert OFFLOAD_MARKER in prompt and "outputs/large_tool_results/search-" in prompt
    assert LARGE_RESULT not in prompt
    header, _saved = read_history(agent.workdir, event["file_path"])
    earlier = header["earlier_files"]
    assert isinstance(earlier, list)
    assert any(path.startswith("outputs/large_tool_results/search-") for path in earlier)


def test_history_file_names_saved_results_and_the_conversation_file_has_them_whole(tmp_path: Path) -> None:
    """Ports `test_offload_history_uses_tool_messages_with_replaced_content` (the archived history
    shows the saved result's path, not its raw content) and
    `test_sanitize_messages_for_summary_only_replaces_tool_message_content`. Same in ctxpress for the
    per-summary history file (the tool message as the summary read it, naming the file), other
    messages unchanged. Intended difference: the thread's conversation file keeps every
    summarised message whole, raw tool results included (S14; README "What a summary names")."""
    agent = _summarised_after_results(tmp_path)
    event = agent.event()
    assert event is not None
    _header, saved = read_history(agent.workdir, event["file_path"])
    saved_tools = [m for m in saved if isinstance(m, ToolMessage)]
    assert saved_tools and all(m.text.startswith(OFFLOAD_MARKER) for m in saved_tools)
    assert [m.text for m in saved if isinstance(m, HumanMessage)] == [
        m.text for m in agent.messages()[: event["cutoff_index"]] if isinstance(m, HumanMessage)
    ]
    (conversation,) = agent.conversation_files()
    _header, everything = read_history(agent.workdir, conversation)
    assert [m.text for m in everything if isinstance(m, ToolMessage)] == [LARGE_RESULT] * len(saved_tools)


def test_below_the_threshold_tool_results_stay_inline(tmp_path: Path) -> None:
    """Ports `test_wrap_model_call_does_not_sanitize_without_summary_trigger` and
    `test_awrap_model_call_emits_nothing_when_summary_not_triggered`. S4, S20: nothing is saved,
    the raw result is in the view, no event."""
    agent = make_agent(tmp_path, config_for(50_000), script=_kb_script())
    events = agent.turn("查资料") + agent.turn("新的问题")
    assert events == [] and agent.workdir.list_files() == []
    tool_view = next(m for m in view_messages(agent.last_request()) if isinstance(m, ToolMessage))
    assert tool_view.text == LARGE_RESULT


def test_write_file_arguments_are_cut_in_both_formats_only_in_the_view(tmp_path: Path) -> None:
    """Ports `test_wrap_model_call_truncates_large_write_file_args_only_in_l1_view`. S7, S2: the
    LangChain `tool_calls` argument and the provider-format `additional_kwargs["tool_calls"]`
    arguments are both cut in the view; the stored message keeps both whole. Intended difference:
    the cut argument is a one-line hint (`[ctxpress:argument-omitted] …`) rather than a prefix with
    a truncation suffix."""
    content = "x" * 5_000
    raw = '{"file_path": "/notes/a.txt", "content": "' + content + '"}'
    call = AIMessage(
        content="",
        tool_calls=[
            {
                "name": "write_file",
                "args": {"file_path": "/notes/a.txt", "content": content},
                "id": "call-1",
                "type": "tool_call",
            }
        ],
        additional_kwargs={
            "tool_calls": [
                {"id": "call-1", "type": "function", "function": {"name": "write_file", "arguments": raw}}
            ]
        },
    )
    agent = make_agent(tmp_path, config_for(1_000, keep=2), script=[call, *answers(4)])
    agent.graph.invoke(
        {"messages": [HumanMessage("写文件" + "y" * 1000)]}, {"configurable": {"thread_id": "w"}}
    )
    sent = next(m for m in agent.model.requests[-1] if isinstance(m, AIMessage) and m.tool_calls)
    assert sent.tool_calls[0]["args"]["content"].startswith(ARGUMENT_MARKER)
    provider_arguments = sent.additional_kwargs["tool_calls"][0]["function"]["arguments"]
    assert content not in provider_arguments and ARGUMENT_MARKER in provider_arguments
    stored = next(
        m
        for m in agent.graph.get_state({"configurable": {"thread_id": "w"}}).values["messages"]
        if isinstance(m, AIMessage) and m.tool_calls
    )
    assert stored.tool_calls[0]["args"]["content"] == content
    assert stored.additional_kwargs["tool_calls"][0]["function"]["arguments"] == raw


def test_after_a_summary_the_kept_results_and_new_results_are_sent_whole(tmp_path: Path) -> None:
    """Ports `test_summary_event_reuses_original_preserved_window_on_later_calls`. S15, S4: later
    requests start from [summary, *messages after the cutoff]; below the threshold the kept and the
    new tool results are sent as stored, not as previews."""
    agent = make_agent(tmp_path, config_for(700, keep=4), script=_kb_script(result_turns=2, extra=20))
    for index in range(6):
        agent.turn(question(index, words=8))
        if agent.event() is not None:
            break
    assert agent.event() is not None
    agent.middleware.config = config_for(50_000, keep=4)  # later calls are below the threshold
    agent.model.script = [tool_call("lookup", {"key": "new"}, "call-new"), AIMessage("ok")]
    agent.turn("继续使用新工具")
    sent = view_messages(agent.last_request())
    assert is_summary_message(sent[0])
    tools = [m for m in sent if isinstance(m, ToolMessage)]
    assert tools[-1].text == "fact about new"
    assert not any(m.text.startswith(OFFLOAD_MARKER) for m in tools)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_summary_emits_started_then_completed_with_cutoff_and_file(
    tmp_path: Path, use_async: bool
) -> None:
    """Ports `test_wrap_model_call_emits_started_and_completed` (sync and async: statuses started,
    completed; completed carries `cutoff_index` and `file_path`). S20. Intended difference: the
    event type is `context_compression` (the seed used `yuxi.context_compression`); S21 maps it to
    the SSE event of that name."""
    agent = make_agent(tmp_path, config_for(300, keep=2), script=answers(20), tools=[])
    for index in range(6):
        events = await agent.aturn(question(index)) if use_async else agent.turn(question(index))
        if agent.event() is not None:
            break
    assert [e["status"] for e in events] == ["started", "completed"]
    assert all(e["type"] == "context_compression" for e in events)
    completed = events[-1]
    assert completed["level"] == "l2" and isinstance(completed["cutoff_index"], int)
    assert completed["file_path"] == agent.event()["file_path"]  # type: ignore[index]


@pytest.mark.parametrize("path", ["below-threshold", "after-l1"])
async def test_an_overflow_falls_back_to_a_summary(tmp_path: Path, path: str) -> None:
    """Ports `test_awrap_model_call_falls_back_to_summary_on_overflow[trigger_raised]` and `[l1_only]`
    (the first call overflows, the summary fallback makes the second succeed; events started,
    completed). S6, S20: one compression announced, completed at L2 with reason `context_overflow`."""
    if path == "below-threshold":
        agent = make_agent(tmp_path, config_for(100_000, keep=2), script=answers(20), tools=[])
        for index in range(3):
            agent.turn(question(index))
        agent.model.context_window = 200
    else:
        agent = make_agent(tmp_path, config_for(1_200, keep=2), script=_kb_script(result_turns=1, extra=20))
        agent.turn("查资料")
        agent.turn(question(1))
        last = agent.pressures[-1]  # the scripted model measures messages only, without tool schemas
        agent.model.context_window = last.system + last.messages + 20
    before = len(agent.model.requests)
    events = await agent.aturn(question(3))
    assert len(agent.model.requests) - before == 2
    assert [e["status"] for e in events] == ["started", "completed"]
    assert (events[-1]["level"], events[-1].get("reason")) == ("l2", "context_overflow")
    assert events[0]["level"] == ("l2" if path == "below-threshold" else "l1")
    assert isinstance(agent.messages()[-1], AIMessage) and agent.event() is not None


async def test_a_main_model_error_after_started_emits_failed(tmp_path: Path) -> None:
    """Ports `test_awrap_model_call_emits_failed_when_handler_raises_after_started`. S20: an
    exception after compression started is announced as `failed` with its error, and raised."""
    script: list[Any] = [*answers(3), RuntimeError("model boom")]
    agent = make_agent(tmp_path, config_for(300, keep=2), script=script, tools=[])
    for index in range(3):
        await agent.aturn(question(index))
    events: list[dict[str, Any]] = []
    with pytest.raises(RuntimeError, match="model boom"):
        async for _mode, item in agent.graph.astream(
            {"messages": [HumanMessage(question(3, words=300))]},
            {"configurable": {"thread_id": "peer-thread"}},
            stream_mode=["custom"],
        ):
            events.append(item)
    assert [e["status"] for e in events] == ["started", "failed"]
    assert "model boom" in events[-1]["error"]


@pytest.mark.parametrize("threshold", [123, 64])
def test_the_threshold_is_k_times_1024_tokens(threshold: int) -> None:
    """Ports `test_summary_graph_config.py::test_summary_trim_limit_matches_summary_threshold`
    (trigger = ("tokens", threshold × 1024)). S4 and the configuration table: `summary_threshold`
    is in K, converted with 1024."""
    config = CompressionConfig(summary_threshold=threshold, summary_keep_messages=7)
    assert config.threshold_tokens == threshold * 1024
