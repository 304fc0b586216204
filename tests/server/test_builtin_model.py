"""The built-in deterministic model: honest label, tool calls by command, streaming, usage, determinism."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxpress.app.models import BUILTIN_LABEL, BuiltinChatModel, BuiltinReply, ReplyPolicy
from ctxpress.app.server.runtime.tools import ask_user


def test_echoes_with_its_label_and_reports_usage() -> None:
    reply = BuiltinChatModel().invoke([HumanMessage("你好，世界")])
    assert isinstance(reply, AIMessage)
    assert reply.text.startswith(BUILTIN_LABEL) and "你好，世界" in reply.text
    assert reply.usage_metadata is not None and reply.usage_metadata["output_tokens"] > 0
    assert reply.response_metadata["model_name"] == "ctxpress-builtin"


def test_commands_call_bound_tools_deterministically() -> None:
    model = BuiltinChatModel().bind_tools([ask_user])
    first = model.invoke([HumanMessage("/ask 要继续吗？")])
    second = model.invoke([HumanMessage("/ask 要继续吗？")])
    assert first.tool_calls == second.tool_calls
    assert first.tool_calls[0]["name"] == "ask_user" and first.tool_calls[0]["args"] == {
        "question": "要继续吗？"
    }

    by_name = model.invoke([HumanMessage('/tool ask_user {"question": "哪个？"}')])
    assert by_name.tool_calls[0]["args"] == {"question": "哪个？"}
    unknown = model.invoke([HumanMessage("/tool web_search {}")])
    assert not unknown.tool_calls and "web_search" in unknown.text
    bad_json = model.invoke([HumanMessage("/tool ask_user {oops")])
    assert not bad_json.tool_calls and "JSON" in bad_json.text


def test_answers_tool_results_with_an_extract_and_streams() -> None:
    history = [
        HumanMessage("/ask 颜色？"),
        AIMessage("", tool_calls=[{"name": "ask_user", "args": {"question": "颜色？"}, "id": "c1"}]),
        ToolMessage("蓝色" * 1000, tool_call_id="c1", name="ask_user"),
    ]
    chunks = list(BuiltinChatModel().stream(history))
    text = "".join(chunk.text for chunk in chunks)
    assert len(chunks) > 3 and "ask_user" in text and len(text) < 1200
    assert chunks[-1].usage_metadata is not None


def test_the_policy_is_replaceable() -> None:
    class Constant:
        def reply(self, messages: object, tool_names: object) -> BuiltinReply:
            return BuiltinReply("固定回答")

    assert isinstance(Constant(), ReplyPolicy)
    assert BuiltinChatModel(policy=Constant()).invoke([HumanMessage("?")]).text == "固定回答"


def test_the_summary_speaks_the_language_people_typed_in_even_through_commands() -> None:
    """Issue 20, item 4: Chinese queries typed as `/tool` commands (English syntax, Chinese values) and
    an earlier summary quoted in the transcript still give Chinese headings, and no marker line."""
    from ctxpress.app.models.summary_writer import write_summary
    from ctxpress.summary.event import SUMMARY_MARKER, summary_message_text

    earlier = summary_message_text("【抽取式摘要】\n用户的目标与要求：\n- 找烤鸭店", "outputs/h.jsonl")
    prompt = (
        f"[1] user: {earlier}\n"
        '[2] user: /tool query_kb {"query": "烤鸭", "top_k": 2}\n'
        "[3] assistant: Searched the knowledge base for duck: 3 results\n"
        '[4] user: /tool query_kb {"query": "故宫 门票"}\n'
    )
    summary = write_summary(prompt, "")
    assert summary.startswith("【抽取式摘要】")
    assert "用户的目标与要求：" in summary and "User goals" not in summary
    assert "找烤鸭店" in summary  # the earlier summary's points are kept …
    assert SUMMARY_MARKER not in summary  # … without its marker
    english = write_summary('[1] user: /tool query_kb {"query": "roast duck"}\n[2] user: and tickets?\n', "")
    assert english.startswith("[Extractive summary]")


def test_phrases_a_new_user_types_reach_the_right_tool() -> None:
    """Issue 20, item 13: notes, the file list and "read the full result" after a summary."""
    from ctxpress.app.models.agent_policy import READ_LIMIT_CHARS, OfflineAgentPolicy
    from ctxpress.summary.event import summary_message_text

    policy = OfflineAgentPolicy()
    tools = ["query_kb", "write_file", "list_files", "read_file"]

    def call(*messages: BaseMessage) -> tuple[str, dict[str, object]]:
        reply = policy.reply(list(messages), tools)
        assert reply.tool_calls, reply.text
        return reply.tool_calls[0]["name"], reply.tool_calls[0]["args"]

    name, args = call(HumanMessage("再写一条笔记：明天去颐和园"))
    assert name == "write_file" and "明天去颐和园" in str(args)
    assert call(HumanMessage("Write another note: buy tickets"))[0] == "write_file"
    assert call(HumanMessage("What files are in the workdir now?"))[0] == "list_files"
    # After a summary the offloaded result's tool message is gone from the request; the summary
    # still names its file, and that is the file read.
    path = "outputs/large_tool_results/query_kb-84be64897f8ff53d.txt"
    summary = HumanMessage(summary_message_text(f"【抽取式摘要】\n关键标识符：\n- {path}", "outputs/h.jsonl"))
    assert call(summary, HumanMessage("读取完整结果")) == (
        "read_file",
        {"path": path, "limit": READ_LIMIT_CHARS},
    )


def test_the_suggested_phrases_reach_their_tools() -> None:
    from ctxpress.app.models.intents import parse_intent
    from ctxpress.app.models.suggestions import SUGGESTIONS

    for item in SUGGESTIONS:
        assert parse_intent(item.zh).kind == item.intent, item.zh
        assert parse_intent(item.en).kind == item.intent, item.en
