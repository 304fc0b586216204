"""The built-in offline model: how it decides, how it answers (extractively, in the user's language),
how it summarises, and that it behaves like a real model (tools, streaming, usage, context window).

Knowledge-base answers come from a real knowledge base over ../shared/data/kb; summaries are made
of real recorded conversations (../shared/data/traces)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir, compact_view
from ctxpress.app.kb import KnowledgeBase
from ctxpress.app.kb.sqlite_store import SqliteKnowledgeStore
from ctxpress.app.kb.tools import query_kb_tool
from ctxpress.app.models import BUILTIN_LABEL, BuiltinChatModel
from ctxpress.app.models.extractive import read_retrieval
from ctxpress.app.models.intents import parse_intent
from ctxpress.app.models.language import detect_language
from ctxpress.app.server.agents_file import AgentConfigError, AgentDefinition, default_agent
from ctxpress.app.server.runtime.agents import AgentRegistry
from ctxpress.app.server.runtime.tools import ask_user, workdir_tools
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.compaction import CompactionCache
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.summary.event import SUMMARY_MARKER
from ctxpress.summary.summarizer import summarize
from ctxpress.tokens import count_request_tokens
from ctxpress.tools.traces import load_trace
from tests.conftest import require_shared_data

THREAD = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def knowledge_base(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    knowledge_base = KnowledgeBase(SqliteKnowledgeStore(tmp_path_factory.mktemp("kb") / "kb.sqlite3"))
    knowledge_base.add_paths(
        [require_shared_data("kb", "crosswoz"), require_shared_data("kb", "tau2-banking")]
    )
    return knowledge_base


@pytest.fixture
def workdirs(tmp_path: Path) -> ConversationWorkdirs:
    return ConversationWorkdirs(tmp_path / "workdirs")


@pytest.fixture
def tools(knowledge_base: KnowledgeBase, workdirs: ConversationWorkdirs) -> list[BaseTool]:
    files = [tool for tool in workdir_tools(workdirs) if tool.name != "list_files"]
    return [query_kb_tool(knowledge_base), ask_user, *files]


class Agent:
    """The offline model in a real `create_agent` graph with compression, one conversation."""

    def __init__(
        self, tools: list[BaseTool], workdirs: ConversationWorkdirs, config: CompressionConfig
    ) -> None:
        self.model = BuiltinChatModel()
        self.graph = create_agent(
            self.model,
            tools,
            system_prompt="你是知识库助手。",
            middleware=[ContextCompressionMiddleware(config, workdir=workdirs.for_model_request)],
            checkpointer=InMemorySaver(),
        )
        self.config: Any = {"configurable": {"thread_id": THREAD}}
        self.events: list[dict[str, Any]] = []

    def send(self, text: str, *, resume: bool = False) -> list[BaseMessage]:
        """One turn; returns the messages it added."""
        before = len(self.messages)
        graph_input: Any = Command(resume=text) if resume else {"messages": [HumanMessage(text)]}
        for mode, chunk in self.graph.stream(graph_input, self.config, stream_mode=["updates", "custom"]):
            if mode == "custom" and chunk.get("type") == "context_compression":
                self.events.append(chunk)
        return self.messages[before:]

    @property
    def messages(self) -> list[BaseMessage]:
        return list(self.graph.get_state(self.config).values.get("messages", []))

    @property
    def interrupts(self) -> list[Any]:
        return [item.value for item in self.graph.get_state(self.config).interrupts]


def tool_calls(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return [
        dict(call) for message in messages if isinstance(message, AIMessage) for call in message.tool_calls
    ]


def final_text(messages: list[BaseMessage]) -> str:
    return next(m.text for m in reversed(messages) if isinstance(m, AIMessage) and m.text)


@pytest.mark.parametrize(
    ("text", "kind", "fields"),
    [
        ("全聚德的电话是多少？", "search", {"query": "全聚德的电话是多少"}),
        ("搜索知识库：Evergreen 账户的月费", "search", {"query": "Evergreen 账户的月费"}),
        ("search the knowledge base for thread_busy", "search", {"query": "thread_busy"}),
        ("帮我查一下", "clarify", {}),
        ("你好！", "greeting", {}),
        ("列出文件", "list_files", {}),
        ("list the files", "list_files", {}),
        ("读取完整结果", "read_full_result", {}),
        ("read the full result", "read_full_result", {}),
        (
            "读取 outputs/large_tool_results/query_kb-0123456789abcdef.txt",
            "read_file",
            {"path": "outputs/large_tool_results/query_kb-0123456789abcdef.txt"},
        ),
        ("open notes/note-1.md", "read_file", {"path": "notes/note-1.md"}),
        ("在文件中查找“全聚德”", "grep", {"pattern": "全聚德"}),
        ("grep 电话 notes/note-1.md", "grep", {"pattern": "电话", "path": "notes/note-1.md"}),
        ('find "monthly fee" in the files', "grep", {"pattern": "monthly fee"}),
        ("记下：用户偏好王府井店，预算 300 元", "write_file", {"text": "用户偏好王府井店，预算 300 元"}),
        ("写入 notes/plan.md：明天去故宫", "write_file", {"path": "notes/plan.md", "text": "明天去故宫"}),
        (
            "把 notes/note-1.md 中的“王府井店”改成“天安门店”",
            "edit_file",
            {"path": "notes/note-1.md", "old": "王府井店", "new": "天安门店"},
        ),
        (
            'replace "Gold" with "Silver" in notes/plan.md',
            "edit_file",
            {"path": "notes/plan.md", "old": "Gold", "new": "Silver"},
        ),
        ("网上搜索 LangGraph 发布", "web_search", {"query": "LangGraph 发布"}),
        ("/ask 要继续吗？", "ask_command", {"text": "要继续吗？"}),
        ("v1.2 版本有什么变化", "search", {"query": "v1.2 版本有什么变化"}),
    ],
)
def test_user_messages_are_read_by_rule(text: str, kind: str, fields: dict[str, str]) -> None:
    intent = parse_intent(text)
    assert intent.kind == kind
    for name, value in fields.items():
        assert getattr(intent, name) == value, name


def test_the_language_follows_the_user() -> None:
    assert detect_language("Evergreen 账户的月费是多少") == "zh"
    assert detect_language("What is L1 压缩") == "en"
    assert detect_language("全聚德") == "zh" and detect_language("") == "en"


def test_a_question_is_searched_and_answered_with_quotes_ids_and_sources(
    tools: list[BaseTool], workdirs: ConversationWorkdirs
) -> None:
    agent = Agent(tools, workdirs, CompressionConfig())
    added = agent.send("全聚德的电话是多少？")
    (call,) = tool_calls(added)
    assert call["name"] == "query_kb" and call["args"] == {"query": "全聚德的电话是多少"}
    answer = final_text(added)
    assert answer.startswith(BUILTIN_LABEL) and "在知识库中检索" in answer
    # Quoted from the real record of the Wangfujing branch, with its id, source and score.
    assert "[restaurant_db-0002#1]" in answer and "crosswoz/restaurant_db.json" in answer
    assert "电话: 65253310" in answer and "得分" in answer

    english = final_text(agent.send("What is the monthly fee of the Evergreen Account?"))
    assert english.startswith(BUILTIN_LABEL) and "Searched the knowledge base" in english
    assert "$6.00" in english and "doc_checking_accounts_evergreen_account_002" in english
    assert not any("\u4e00" <= character <= "\u9fff" for character in english.removeprefix(BUILTIN_LABEL))


def test_an_offloaded_result_is_answered_from_its_preview_and_read_back(
    tools: list[BaseTool], workdirs: ConversationWorkdirs
) -> None:
    config = CompressionConfig(
        summary_threshold=3, summary_tool_result_token_limit=300, summary_keep_messages=6
    )
    agent = Agent(tools, workdirs, config)
    answer = final_text(agent.send("全聚德的电话是多少？"))
    l1 = [event for event in agent.events if event["status"] == "completed" and event["level"] == "l1"]
    assert l1 and l1[0]["files_written"], "the large search result was offloaded (L1)"
    path = l1[0]["files_written"][0]
    assert path.startswith("outputs/large_tool_results/query_kb-")
    assert path in answer and "restaurant_db-0002#1" in answer  # ids survive in the S9 preview

    read = agent.send("读取完整结果")
    assert tool_calls(read)[0]["name"] == "read_file" and tool_calls(read)[0]["args"]["path"] == path
    result = next(m for m in read if isinstance(m, ToolMessage))
    assert json.loads(result.text)["results"][0]["id"] == "restaurant_db-0002#1"  # the full text, read back
    assert "电话" in final_text(read)


def test_a_vague_request_asks_the_user_and_the_answer_is_searched(
    tools: list[BaseTool], workdirs: ConversationWorkdirs
) -> None:
    agent = Agent(tools, workdirs, CompressionConfig())
    added = agent.send("帮我查一下")
    assert tool_calls(added)[0]["name"] == "ask_user"
    assert agent.interrupts and "关键词" in agent.interrupts[0]["question"]
    resumed = agent.send("烤鸭", resume=True)
    assert tool_calls(resumed)[-1] == {
        **tool_calls(resumed)[-1],
        "name": "query_kb",
        "args": {"query": "烤鸭"},
    }
    acknowledged = next(m for m in resumed if isinstance(m, AIMessage) and m.tool_calls)
    assert acknowledged.text == f"{BUILTIN_LABEL}收到你的回答（ask_user）：烤鸭"
    answer = final_text(resumed)
    assert "在知识库中检索“烤鸭”" in answer and answer.count("烤鸭店") >= 3


def test_notes_are_written_edited_listed_and_grepped(
    tools: list[BaseTool], workdirs: ConversationWorkdirs
) -> None:
    agent = Agent(tools, workdirs, CompressionConfig())
    workdir = workdirs.for_conversation(THREAD)
    agent.send("记下：用户偏好全聚德王府井店，预算 300 元")
    assert workdir.read_bytes("notes/note-1.md").decode() == "用户偏好全聚德王府井店，预算 300 元\n"
    agent.send("记下：第二条笔记")
    assert workdir.exists("notes/note-2.md")
    edited = agent.send("把 notes/note-1.md 中的“王府井店”改成“天安门店”")
    assert tool_calls(edited)[0]["name"] == "edit_file" and "已修改" in final_text(edited)
    assert workdir.read_bytes("notes/note-1.md").decode() == "用户偏好全聚德天安门店，预算 300 元\n"
    listed = final_text(agent.send("列出文件"))
    assert "notes/note-1.md" in listed and "notes/note-2.md" in listed
    found = final_text(agent.send("在文件中查找“天安门”"))
    assert "notes/note-1.md:1: 用户偏好全聚德天安门店" in found
    missing = final_text(agent.send("把 notes/note-1.md 中的“不存在的词”改成“x”"))
    assert "edit_file" in missing and "does not occur" in missing


def test_without_the_tool_it_needs_it_says_so_and_echoes(knowledge_base: KnowledgeBase) -> None:
    model = BuiltinChatModel()
    plain = model.invoke([HumanMessage("全聚德的电话是多少？")])
    assert (
        plain.text.startswith(BUILTIN_LABEL) and "全聚德的电话是多少" in plain.text and not plain.tool_calls
    )
    asked = model.bind_tools([query_kb_tool(knowledge_base)]).invoke([HumanMessage("/ask 继续吗？")])
    assert not asked.tool_calls and "ask_user" in asked.text and "query_kb" in asked.text


def test_it_summarises_a_real_conversation_extractively() -> None:
    trace = require_shared_data("traces", "tau-bench", "historical_trajectories", "gpt-4o-airline.json")
    conversation = load_trace(trace)[0]
    messages = conversation.messages[1:20]  # without the system prompt
    outcome = summarize(BuiltinChatModel(), CompressionConfig(), messages)
    assert outcome.ok, outcome.error
    summary = outcome.text
    assert summary.startswith(BUILTIN_LABEL) and "[Extractive summary]" in summary
    assert "User goals and requests:" in summary and "book a flight from New York to Seattle" in summary
    assert "mia_li_3668" in summary and "2024-05-20" in summary  # identifiers and numbers kept as written
    assert "get_user_details ×1" in summary  # the tools called, with their arguments


def test_a_chinese_conversation_is_summarised_in_chinese() -> None:
    trace = require_shared_data("traces", "glaive-toolcall", "data", "glaive_toolcall_zh_demo.json")
    messages = load_trace(trace)[0].messages
    outcome = summarize(BuiltinChatModel(), CompressionConfig(), messages)
    assert outcome.ok and "【抽取式摘要】" in outcome.text and "用户的目标与要求：" in outcome.text
    assert "我需要为John Doe生成一张发票。" in outcome.text
    assert "INV12345" in outcome.text and "$0.5" in outcome.text and "generate_invoice 1次" in outcome.text


def test_stacked_summaries_keep_what_the_earlier_one_kept() -> None:
    trace = require_shared_data("traces", "tau-bench", "historical_trajectories", "gpt-4o-airline.json")
    messages = load_trace(trace)[0].messages[1:]
    first = summarize(BuiltinChatModel(), CompressionConfig(), messages[:10]).text
    earlier = HumanMessage(f"{SUMMARY_MARKER} Summary of the earlier conversation.\n\n{first}")
    second = summarize(BuiltinChatModel(), CompressionConfig(), [earlier, *messages[10:20]]).text
    assert "book a flight from New York to Seattle" in second and "mia_li_3668" in second
    assert second.count("User goals and requests:") == 1


def test_it_reports_usage_from_the_estimator_and_streams_tool_calls(knowledge_base: KnowledgeBase) -> None:
    tool = query_kb_tool(knowledge_base)
    model = BuiltinChatModel().bind_tools([tool])
    messages: list[BaseMessage] = [HumanMessage("故宫的门票多少钱？")]
    chunks = list(model.stream(messages))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert merged.tool_calls == [
        {**merged.tool_calls[0], "name": "query_kb", "args": {"query": "故宫的门票多少钱"}}
    ]
    assert merged.usage_metadata is not None
    expected = count_request_tokens(messages, None, [convert_to_openai_tool(tool)])
    assert merged.usage_metadata["input_tokens"] == expected > count_request_tokens(messages)
    assert merged.usage_metadata["output_tokens"] > 0
    text_chunks = list(BuiltinChatModel().stream([HumanMessage("你好")]))
    assert len(text_chunks) > 3 and "".join(chunk.text for chunk in text_chunks).startswith(BUILTIN_LABEL)


def test_beyond_its_context_window_it_overflows_and_compression_recovers(
    tools: list[BaseTool], workdirs: ConversationWorkdirs
) -> None:
    with pytest.raises(ContextOverflowError, match="maximum context length is 200 tokens"):
        BuiltinChatModel(context_window=200).invoke([HumanMessage("全聚德" * 300)])
    # A threshold above the model's window: only the overflow (S6) can trigger compression.
    small = BuiltinChatModel(context_window=2500)
    graph = create_agent(
        small,
        tools,
        middleware=[
            ContextCompressionMiddleware(
                CompressionConfig(
                    summary_threshold=50, summary_keep_messages=2, summary_tool_result_token_limit=300
                ),
                workdir=workdirs.for_model_request,
            )
        ],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": THREAD}}
    events: list[dict[str, Any]] = []
    for question in ("全聚德的电话是多少？", "故宫附近有什么酒店？", "烤鸭 人均消费"):
        for mode, chunk in graph.stream(
            {"messages": [HumanMessage(question)]}, config, stream_mode=["custom", "updates"]
        ):
            if mode == "custom":
                events.append(chunk)
    forced = [e for e in events if e.get("reason") == "context_overflow" and e["status"] == "completed"]
    assert forced, "the overflow forced a compression that then succeeded"
    state = graph.get_state(config).values
    assert state["_summarization_event"]["file_path"].startswith("outputs/conversation_history/")
    assert final_text(state["messages"]).startswith(BUILTIN_LABEL)


def test_the_summary_call_is_recognised_without_tags_too() -> None:
    transcript = "请总结：\n\n[1] user: 把阈值改为 64K，决定采用 qwen 配置。\n\n[2] assistant: 好的，已记录。"
    reply = BuiltinChatModel()._generate([HumanMessage(transcript)]).generations[0].message
    assert "【抽取式摘要】" in reply.text and "64K" in reply.text


@pytest.fixture
def preview_view(knowledge_base: KnowledgeBase, tmp_path: Path) -> Iterator[list[BaseMessage]]:
    """A real search result in its L1 view (the structured S9 preview)."""
    call = {"name": "query_kb", "args": {"query": "Evergreen monthly fee"}, "id": "c1", "type": "tool_call"}
    result = query_kb_tool(knowledge_base).invoke({"query": "Evergreen monthly fee"})
    messages: list[BaseMessage] = [
        HumanMessage("What is the monthly fee of the Evergreen Account?"),
        AIMessage("", tool_calls=[call]),
        ToolMessage(result, tool_call_id="c1", name="query_kb"),
    ]
    view = compact_view(
        messages,
        CompressionConfig(summary_tool_result_token_limit=200),
        LocalWorkdir(tmp_path),
        cache=CompactionCache(),
    )
    yield view.messages


def test_answers_from_a_preview_name_the_file_holding_the_rest(preview_view: list[BaseMessage]) -> None:
    reference = parse_offload_reference(preview_view[-1].text)
    assert reference is not None
    answer = BuiltinChatModel().invoke(preview_view).text
    assert reference.path in answer and "say 'read the full result'" in answer
    assert "doc_checking_accounts_evergreen_account_002#1" in answer and "8 results" in answer


def test_a_preview_naming_one_source_for_all_results_is_read_with_that_source(
    knowledge_base: KnowledgeBase, tmp_path: Path
) -> None:
    """S9 names a source every result shares once, in the preview's first line: the built-in model
    still reads the preview as a retrieval result, each record with that source."""
    result = query_kb_tool(knowledge_base).invoke({"query": "故宫 门票", "limit": 8})
    sources = {record["source"] for record in json.loads(result)["results"]}
    assert len(sources) == 1  # every hit from the same CrossWOZ file
    call = {"name": "query_kb", "args": {"query": "故宫 门票"}, "id": "c1", "type": "tool_call"}
    messages: list[BaseMessage] = [
        HumanMessage("故宫门票多少钱？"),
        AIMessage("", tool_calls=[call]),
        ToolMessage(result, tool_call_id="c1", name="query_kb"),
    ]
    view = compact_view(
        messages, CompressionConfig(summary_tool_result_token_limit=200), LocalWorkdir(tmp_path)
    ).messages
    (source,) = sources
    assert f"8 results, all with source={source}" in view[-1].text
    read = read_retrieval(view[-1].text)
    assert read is not None and read.total == 8 and read.records
    assert all(record.fields["source"] == source for record in read.records)


def test_its_settings_come_from_the_agents_file_and_mistakes_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry_args: dict[str, Any] = {
        "checkpointer": InMemorySaver(),
        "workdirs": ConversationWorkdirs(tmp_path),
    }
    sized = AgentDefinition(
        name="sized", model={"model": "builtin", "kwargs": {"context_window": 4096}}, tools=()
    )
    runtime = AgentRegistry([sized], **registry_args).get("sized")
    assert runtime is not None and isinstance(runtime.main_model, BuiltinChatModel)
    assert runtime.main_model.context_window == 4096 and runtime.main_model.profile == {
        "max_input_tokens": 4096,
        "tool_calling": True,
    }
    typo = AgentDefinition(
        name="typo", model={"model": "builtin", "kwargs": {"context_windw": 4096}}, tools=()
    )
    with pytest.raises(AgentConfigError, match="context_windw"):
        AgentRegistry([typo], **registry_args)
    monkeypatch.setenv("CTXPRESS_BUILTIN_CONTEXT_WINDOW", "8192")
    assert default_agent().model.kwargs == {"context_window": 8192}
    monkeypatch.setenv("CTXPRESS_BUILTIN_CONTEXT_WINDOW", "lots")
    with pytest.raises(AgentConfigError, match="CTXPRESS_BUILTIN_CONTEXT_WINDOW"):
        default_agent()
