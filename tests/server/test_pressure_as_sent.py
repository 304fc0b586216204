"""Issue 20, items 1–2: the status panel's figure is the next request *as the model will receive
it* — L1's view once the raw request reaches the threshold (S5) — so a conversation whose large
tool result L1 offloads is not reported (or hinted, S22) as over the threshold; the raw figure is
reported beside it. A manual compression's `tokens_before` / `tokens_after` are that same figure,
before and after. Measuring writes nothing to the workdir. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.testing.api import create_conversation, read_events, send
from ctxpress.config import CompressionConfig
from tests.fakes import ScriptedChatModel, tool_call

from .conftest import ServerFactory
from .test_compress import compress, context
from .test_vocabulary import summary_script

#: About 6 K tokens of Chinese: one result passes the 4 K threshold; its L1 preview does not.
RESULT = "".join(f"第{index}条记录：北京的餐馆和景点很多，故宫门票六十元。\n" for index in range(800))


@tool
def lookup(query: str) -> str:
    """Look something up (a large result)."""
    return RESULT


def script(messages: Sequence[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage) and "查" in last.text:
        return tool_call("lookup", {"query": last.text}, f"call-{len(messages)}")
    if isinstance(last, ToolMessage):
        return AIMessage("查到了。")
    return AIMessage(f"好的：{last.text}")


def agent() -> AgentDefinition:
    return AgentDefinition(
        name="lookup",
        model=ModelSpec(model=ScriptedChatModel(script=script)),
        summary_model=ModelSpec(model=ScriptedChatModel(script=summary_script, model_name="summarizer")),
        tools=(lookup,),
        capabilities=("context_compression",),
        compression=CompressionConfig(
            summary_threshold=4, summary_keep_messages=2, summary_tool_result_token_limit=300
        ),
    )


def test_the_panel_reports_the_request_as_sent_after_l1(start_server: ServerFactory) -> None:
    server = start_server(agents=[agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    events = read_events(alice, send(alice, conversation_id, "帮我查一下北京的餐馆")["run"]["id"])
    files = alice.get(f"/api/conversations/{conversation_id}/files").json()["files"]

    status = context(alice, conversation_id)
    assert status["compacted"] is True
    assert status["raw_estimated_tokens"] >= status["threshold_tokens"]  # before L1: over
    assert status["estimated_tokens"] < status["threshold_tokens"] * 0.85  # as sent: well under
    assert status["ratio"] == status["estimated_tokens"] / status["threshold_tokens"]
    assert status["suggest_compress"] is False  # the hint follows the figure that decides (S22)
    assert sum(status["breakdown"].values()) == status["estimated_tokens"]
    # It is the request the model did receive on the last call (L1 ran there too), give or take
    # the answer that call produced.
    sent = [event.data["total"] for event in events if event.type == "context_pressure"][-1]
    assert sent <= status["estimated_tokens"] < sent + 100
    # Measuring wrote nothing: the workdir holds what the run wrote, no more.
    assert alice.get(f"/api/conversations/{conversation_id}/files").json()["files"] == files

    for text in ("第二个问题", "第三个问题", "第四个问题"):
        read_events(alice, send(alice, conversation_id, text)["run"]["id"])
    before = context(alice, conversation_id)
    answer = compress(alice, conversation_id).json()
    assert answer["compressed"] is True
    after = context(alice, conversation_id)
    # One definition: the result line's figures are the ring's, before and after.
    assert answer["tokens_before"] == before["estimated_tokens"]
    assert answer["tokens_after"] == after["estimated_tokens"]


def test_below_the_threshold_both_figures_are_the_same(start_server: ServerFactory) -> None:
    server = start_server(agents=[agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    read_events(alice, send(alice, conversation_id, "你好")["run"]["id"])
    status = context(alice, conversation_id)
    assert status["compacted"] is False
    assert status["estimated_tokens"] == status["raw_estimated_tokens"] < status["threshold_tokens"]
    assert status["ratio"] == status["raw_ratio"]
