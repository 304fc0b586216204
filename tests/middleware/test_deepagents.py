"""ctxpress as DeepAgents' summarization: a real `create_deep_agent` graph around scripted models.

`DeepAgentsCompressionMiddleware` takes the place of DeepAgents' `SummarizationMiddleware` in the
main agent and in its `task` sub-agents; a `FilesystemBackend` rooted at the workdir lets the
agent's own `read_file` open what ctxpress offloaded (S8) and the history files (S14).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from deepagents import create_deep_agent
from deepagents.backends import FilesystemBackend
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, LocalWorkdir, RequestPressure
from ctxpress.compaction.markers import OFFLOAD_MARKER, parse_offload_reference
from ctxpress.deepagents_drop_in import DeepAgentsCompressionMiddleware
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.history import HISTORY_DIR, is_conversation_file, read_history
from ctxpress.tokens import count_request_tokens
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.conftest import kb_call, query_kb
from tests.middleware.test_flow import THREAD, run_turn

#: DeepAgents' built-in tool schemas (ls, read_file, write_file, edit_file, glob, grep, execute,
#: write_todos, task) count towards the threshold: about 2.8 K tokens by the default estimate.
DEEPAGENTS_TOOL_TOKENS = range(2_400, 3_300)


class DeepAgent:
    """A deep agent with ctxpress in place of DeepAgents' summarization, and what it recorded."""

    def __init__(
        self,
        tmp_path: Path,
        model: ScriptedChatModel,
        config: CompressionConfig,
        *,
        subagents: Sequence[Any] | None = None,
    ) -> None:
        self.root = tmp_path / "workdir"
        self.workdir = LocalWorkdir(self.root)
        self.model = model
        self.summary_model = ScriptedChatModel(
            script=[AIMessage(content=f"第{i}份摘要：用户在查询北京景点。") for i in range(30)]
        )
        self.pressures: list[RequestPressure] = []
        self.middleware = DeepAgentsCompressionMiddleware(
            config, workdir=self.workdir, summary_model=self.summary_model, on_pressure=self.pressures.append
        )
        self.graph = create_deep_agent(
            model,
            [query_kb],
            middleware=[self.middleware],
            subagents=subagents,
            backend=FilesystemBackend(root_dir=self.root, virtual_mode=True),
            checkpointer=InMemorySaver(),
        )

    def state(self) -> dict[str, Any]:
        return dict(self.graph.get_state(THREAD).values)

    def turn(self, text: str) -> list[dict[str, Any]]:
        return run_turn(self.graph, text)


def _kb_turns(turns: int, offset: int = 0) -> list[AIMessage]:
    script: list[AIMessage] = []
    for turn in range(offset, offset + turns):
        script += [kb_call(f"kb{turn}", turn), AIMessage(content=f"第{turn}轮：故宫、颐和园都值得去。")]
    return script


def _read_file(path: str, call_id: str) -> AIMessage:
    return tool_call("read_file", {"file_path": path, "offset": 0, "limit": 50}, call_id)


def _tool_result(messages: Sequence[BaseMessage], call_id: str) -> str:
    return next(m.text for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == call_id)


def test_drop_in_replaces_deepagents_summarization_with_cumulative_cutoffs(tmp_path: Path) -> None:
    turns = 8
    config = CompressionConfig(summary_threshold=4, summary_keep_messages=4)
    agent = DeepAgent(tmp_path, ScriptedChatModel(script=_kb_turns(turns)), config)
    cutoffs: list[int] = []
    for turn in range(turns):
        agent.turn(f"第{turn}个问题：北京有哪些景点？")
        event = agent.state().get("_summarization_event")
        if event is not None:
            cutoffs.append(event["cutoff_index"])
            # ctxpress wrote it: DeepAgents' own summariser is not in the stack.
            assert is_summary_message(event["summary_message"])
    # S15: several summaries, each cutoff a full-state position after the previous one.
    assert len(set(cutoffs)) >= 2
    assert cutoffs == sorted(cutoffs)
    assert len(agent.summary_model.requests) == len(set(cutoffs))
    # The main model got two calls per turn and nothing else: DeepAgents' summariser (which would
    # call it for its summaries) is not in the stack.
    assert len(agent.model.requests) == 2 * turns
    # The tool schemas DeepAgents adds count towards the threshold; every request stays under it.
    assert all(p.tools in DEEPAGENTS_TOOL_TOKENS for p in agent.pressures)
    assert all(p.total < config.threshold_tokens for p in agent.pressures)
    # One history file per summary, and one conversation file holding everything summarised.
    files = sorted(f.path for f in agent.workdir.list_files(HISTORY_DIR))
    histories = [path for path in files if not is_conversation_file(path)]
    assert len(histories) == len(set(cutoffs))
    (conversation,) = [path for path in files if is_conversation_file(path)]
    header, messages = read_history(agent.workdir, conversation)
    assert header["range"] == [0, cutoffs[-1]] and len(messages) == cutoffs[-1]


def test_the_agents_own_read_file_opens_offloaded_results_and_history_files(tmp_path: Path) -> None:
    config = CompressionConfig(summary_threshold=4, summary_keep_messages=4)
    agent = DeepAgent(tmp_path, ScriptedChatModel(script=_kb_turns(4)), config)
    for turn in range(4):
        agent.turn(f"第{turn}个问题：北京有哪些景点？")
    state = agent.state()
    history_path = state["_summarization_event"]["file_path"]
    summary_text = state["_summarization_event"]["summary_message"].text
    named = re.search(r"every earlier message is in full at (\S+)\.", summary_text)
    assert history_path and named and is_conversation_file(named.group(1))
    assert f"The summarised messages are in the workdir at {history_path};" in summary_text
    conversation_path = named.group(1)
    offloaded = next(
        reference
        for request in reversed(agent.model.requests)
        for message in request
        if isinstance(message, ToolMessage)
        and (reference := parse_offload_reference(message.text)) is not None
    )
    agent.model.script = [
        _read_file(offloaded.path, "r1"),
        _read_file(history_path, "r2"),
        _read_file(conversation_path, "r3"),
        AIMessage(content="我读到了完整的结果和历史。"),
    ]
    agent.turn("请读出完整的检索结果和之前的对话记录")
    messages = agent.state()["messages"]
    result_text = _tool_result(messages, "r1")
    assert "attraction-" in result_text and "not found" not in result_text.lower()
    history_text = _tool_result(messages, "r2")
    assert "ctxpress-history/1" in history_text  # the history file's header line
    conversation_text = _tool_result(messages, "r3")
    assert "ctxpress-conversation/1" in conversation_text and "第0个问题" in conversation_text
    assert messages[-1].content == "我读到了完整的结果和历史。"


def test_overflow_trimming_writes_the_trimmed_results_into_the_deep_agents_state(tmp_path: Path) -> None:
    # S6/S30: a kb result of the current turn (no summary keeps less) whose preview still
    # overflows a small window.
    config = CompressionConfig(summary_threshold=100, summary_keep_messages=6)
    agent = DeepAgent(tmp_path, ScriptedChatModel(script=[AIMessage(content="好的")]), config)
    agent.turn("先不查")
    window = count_request_tokens(agent.model.requests[-1]) + 250
    agent.model.context_window = window
    agent.model.script = [kb_call("a", 0), AIMessage(content="最终答案")]
    events = agent.turn("再问一次")
    state = agent.state()
    trimmed = [
        m for m in state["messages"] if isinstance(m, ToolMessage) and m.text.startswith(OFFLOAD_MARKER)
    ]
    assert trimmed, "the kept tool results were trimmed in the deep agent's state"
    sent = {m.id: m.text for m in agent.model.requests[-1] if isinstance(m, ToolMessage)}
    assert all(sent.get(m.id) == m.text for m in trimmed)  # the checkpoint matches what was sent
    assert state["messages"][-1].content == "最终答案"
    assert any(e["status"] == "completed" and e.get("trimmed_tool_results") for e in events)


@pytest.mark.parametrize("declared", [False, True], ids=["general-purpose", "declared-subagent"])
def test_task_subagents_run_ctxpress_without_the_parents_summary(tmp_path: Path, declared: bool) -> None:
    config = CompressionConfig(summary_threshold=4, summary_keep_messages=4)
    model = ScriptedChatModel(script=_kb_turns(4))
    subagents = None
    subagent_type = "general-purpose"
    if declared:
        subagent_type = "researcher"
        subagents = [
            {
                "name": "researcher",
                "description": "Searches the knowledge base.",
                "system_prompt": "你是检索助手。",
                "tools": [query_kb],
                "middleware": [
                    DeepAgentsCompressionMiddleware(config, workdir=LocalWorkdir(tmp_path / "workdir"))
                ],
            }
        ]
    agent = DeepAgent(tmp_path, model, config, subagents=subagents)
    for turn in range(4):
        agent.turn(f"第{turn}个问题：北京有哪些景点？")
    parent_event = agent.state()["_summarization_event"]
    assert parent_event is not None
    before = len(model.requests)
    model.script = [
        tool_call("task", {"description": "查一下北京的景点", "subagent_type": subagent_type}, "t1"),
        kb_call("sub1", 7),  # the sub-agent searches ...
        AIMessage(content="子任务结果：故宫。"),  # ... and answers from the offloaded preview
        AIMessage(content="子任务完成。"),
    ]
    agent.turn("请交给子智能体去查")
    sub_requests = [r for r in model.requests[before:] if any(m.text == "查一下北京的景点" for m in r)]
    assert len(sub_requests) == 2
    for request in sub_requests:
        # The sub-agent starts from the task alone: no parent summary, no parent question.
        assert not any(is_summary_message(m) for m in request)
        assert not any(isinstance(m, HumanMessage) and "问题" in m.text for m in request)
    # ctxpress runs inside the sub-agent too: its own large result reaches its model offloaded.
    assert any(isinstance(m, ToolMessage) and m.text.startswith(OFFLOAD_MARKER) for m in sub_requests[-1])
    state = agent.state()
    assert state["_summarization_event"]["cutoff_index"] >= parent_event["cutoff_index"]
    assert state["messages"][-1].content == "子任务完成。"
