"""S24: a sub-agent running inside a conversation's run uses the same workdir; its events are labelled."""

from __future__ import annotations

from collections.abc import Sequence

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.runtime.tools import workdir_tools
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.app.testing.api import create_conversation, read_events, send
from ctxpress.app.testing.records import query_sql
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory, SettingsFactory
from .fakes import new_call_id

FINDINGS = "outputs/research/findings.md"


def researcher_script(messages: Sequence[BaseMessage]) -> AIMessage:
    if isinstance(messages[-1], HumanMessage):
        args = {"path": FINDINGS, "content": f"发现：{messages[-1].text}"}
        return AIMessage("", tool_calls=[{"name": "write_file", "args": args, "id": new_call_id("write")}])
    return AIMessage(f"已写入 {FINDINGS}")


def lead_script(messages: Sequence[BaseMessage]) -> AIMessage:
    if isinstance(messages[-1], HumanMessage):
        args = {"task": messages[-1].text}
        return AIMessage("", tool_calls=[{"name": "delegate", "args": args, "id": new_call_id("delegate")}])
    assert isinstance(messages[-1], ToolMessage)
    return AIMessage(f"子代理说：{messages[-1].text}")


def delegate_tool(workdirs: ConversationWorkdirs) -> BaseTool:
    researcher = create_agent(
        ScriptedChatModel(script=researcher_script), workdir_tools(workdirs), name="researcher"
    )

    @tool
    async def delegate(task: str) -> str:
        """Hand a task to the research sub-agent."""
        result = await researcher.ainvoke({"messages": [HumanMessage(task)]})
        return str(result["messages"][-1].text)

    return delegate


def test_sub_agents_share_the_conversation_workdir(
    start_server: ServerFactory, make_settings: SettingsFactory
) -> None:
    workdirs = ConversationWorkdirs(make_settings().workdirs_dir)
    lead = AgentDefinition(
        name="lead",
        model=ModelSpec(model=ScriptedChatModel(script=lead_script)),
        tools=(delegate_tool(workdirs),),
        capabilities=(),
    )
    server = start_server(agents=[lead])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    other_conversation = create_conversation(alice)

    events = read_events(alice, send(alice, conversation_id, "调研竞品")["run"]["id"])
    assert events[-1].data["status"] == "succeeded"

    # The sub-agent wrote into this conversation's workdir, not anywhere else.
    content = alice.get(f"/api/conversations/{conversation_id}/files/{FINDINGS}")
    assert content.status_code == 200 and content.text == "发现：调研竞品"
    assert alice.get(f"/api/conversations/{other_conversation}/files").json()["files"] == []

    # Its steps are shown with their namespace; only the lead agent's messages are the chat record.
    sub_events = [event for event in events if "namespace" in event.data]
    assert {event.type for event in sub_events} >= {"message", "tool_call", "tool_result"}
    rows = query_sql(
        server.services.settings,
        "SELECT role, content FROM messages WHERE conversation_id = :cid ORDER BY id",
        cid=conversation_id,
    )
    assert [row.role for row in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[-1].content == f"子代理说：已写入 {FINDINGS}"
