"""A tool call its run never answered is answered before the next message, saying what happened
(issue 19, item 10), in the conversation's language.

The SIGKILL case ("the service restarted during the call; the result is unknown") runs on real
processes in `test_sigkill.py`; the question the user never answered in `tests/server/test_interrupt.py`.
Here: a run cancelled while its tool ran, and a run whose tool failed it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.runtime.unanswered_calls import unanswered_call_text
from ctxpress.app.testing.api import send, wait_for_status
from tests.fakes import ScriptedChatModel
from tests.server.fakes import new_call_id

from .support import state_messages, state_values, turn

entered = threading.Event()
released = threading.Event()


@tool
def slow_lookup(topic: str) -> str:
    """Look a topic up (slowly)."""
    entered.set()
    released.wait(timeout=60)
    return f"found {topic}"


@tool
def broken_lookup(topic: str) -> str:
    """Look a topic up (always fails)."""
    raise RuntimeError("the lookup backend is down")


def lookup_script(messages: Sequence[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage) and last.text.startswith(("慢", "slow")):
        return AIMessage(
            "", tool_calls=[{"name": "slow_lookup", "args": {"topic": last.text}, "id": new_call_id("s")}]
        )
    if isinstance(last, HumanMessage) and last.text.startswith(("坏", "broken")):
        call = {"name": "broken_lookup", "args": {"topic": last.text}, "id": new_call_id("b")}
        return AIMessage("", tool_calls=[call])
    return AIMessage(f"好的：{last.text[:40]}")


def lookup_agent() -> AgentDefinition:
    return AgentDefinition(
        name="lookup",
        default=True,
        model=ModelSpec(model=ScriptedChatModel(script=lookup_script)),
        tools=(slow_lookup, broken_lookup),
        capabilities=(),
    )


def _patches(client: Any, conversation_id: str) -> list[str]:
    messages = state_messages(state_values(client, conversation_id))
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


def test_a_run_cancelled_or_failed_during_a_tool_call_says_so(start_server: Any) -> None:
    server = start_server(agents=[lookup_agent()])
    client = server.client(server.create_user("alice"))
    released.clear()
    try:
        for opening, language in (("慢慢查一下合同", "zh"), ("slowly look up the contract", "en")):
            conversation_id = client.post("/api/conversations", json={}).json()["id"]
            entered.clear()
            run_id = send(client, conversation_id, opening)["run"]["id"]
            assert entered.wait(timeout=30), "the tool call never started"
            assert client.post(f"/api/runs/{run_id}/cancel").status_code == 200
            wait_for_status(client, run_id, {"cancelled"})
            assert (
                turn(client, conversation_id, "继续" if language == "zh" else "go on").status == "succeeded"
            )
            assert _patches(client, conversation_id) == [unanswered_call_text("run_cancelled", language)]
    finally:
        released.set()

    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    assert turn(client, conversation_id, "broken lookup of the contract").status == "failed"
    assert turn(client, conversation_id, "and now?").status == "succeeded"
    assert _patches(client, conversation_id) == [unanswered_call_text("run_failed", "en")]
