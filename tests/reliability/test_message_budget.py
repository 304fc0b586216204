"""One message must not break a conversation (issue 19, item 5).

A message of 100,000 Chinese characters passed `max_input_chars` and was accepted (202), but its
estimate was more than the agent's model accepts, so every later turn failed (here: ~71K tokens
for a model accepting 64K). Now intake compares the message's estimate with the agent's message budget (the smaller of
the compression threshold and the model's context window, less the system prompt and the tools)
and answers 413 `message_too_large` with the figures and what to do, before anything is stored.
The budget is listed with the agent, and a message just within it keeps the conversation working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.usecases.message_limits import message_tokens
from ctxpress.app.testing.records import query_sql
from ctxpress.tokens import count_request_tokens
from tests.fakes import ScriptedChatModel

from .support import state_values, turn

WINDOW = 65_536
HUGE_CHINESE = "我们需要在下个季度前完成合同的全部审阅工作并提交报告。" * 3_704  # ~100,000 characters


def _within(runtime: Any, budget: int) -> str:
    """The longest prefix of HUGE_CHINESE whose estimate is within `budget` tokens."""
    low, high = 0, len(HUGE_CHINESE)
    while low < high:
        middle = (low + high + 1) // 2
        if message_tokens(runtime, HUGE_CHINESE[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return HUGE_CHINESE[:low]


def windowed_script(messages: Sequence[BaseMessage]) -> AIMessage:
    """A model that accepts WINDOW tokens of input, like a real one (too much: ContextOverflowError)."""
    tokens = count_request_tokens(messages)
    if tokens > WINDOW:
        raise ContextOverflowError(f"maximum context length is {WINDOW} tokens; the input is {tokens}")
    return AIMessage(f"收到（{tokens} tokens）。")


def small_window_agent() -> AgentDefinition:
    """Threshold 100 K (the default) on a model that declares a 64 K window."""
    model = ScriptedChatModel(script=windowed_script, profile={"max_input_tokens": WINDOW})
    return AgentDefinition(
        name="windowed", default=True, model=ModelSpec(model=model), tools=("read_file", "write_file")
    )


def test_a_message_over_the_agents_budget_is_refused_before_anything_is_stored(start_server: Any) -> None:
    server = start_server(agents=[small_window_agent()])
    client = server.client(server.create_user("alice"))
    agent = client.get("/api/agents").json()[0]
    budget = agent["message_budget"]
    assert agent["max_message_tokens"] == budget["max_message_tokens"]
    assert budget["context_window"] == WINDOW and budget["threshold_tokens"] == 102_400
    room = WINDOW - budget["fixed_tokens"] - budget["summary_tokens"] - WINDOW // 8
    assert budget["max_message_tokens"] == room

    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    assert turn(client, conversation_id, "你好").status == "succeeded"
    before = state_values(client, conversation_id)
    text = HUGE_CHINESE[:100_000]
    assert len(text) == server.services.settings.max_input_chars  # the character limit lets it in
    response = client.post(f"/api/conversations/{conversation_id}/runs", json={"input": text})
    assert response.status_code == 413, response.text[-300:]
    error = response.json()["error"]
    assert error["code"] == "message_too_large"
    assert error["details"]["estimated_tokens"] > 70_000
    assert error["details"]["max_message_tokens"] == budget["max_message_tokens"]
    assert f"{budget['max_message_tokens']:,}" in error["message"] and "file" in error["message"]

    # Nothing was stored: no run, no message, the same state.
    runs = query_sql(
        server.services.settings, "SELECT count(*) FROM runs WHERE conversation_id = :c", c=conversation_id
    )
    assert runs[0][0] == 1
    messages = client.get(f"/api/conversations/{conversation_id}/messages").json()["items"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert state_values(client, conversation_id) == before

    # A message just within the budget is accepted, and the conversation goes on after it.
    runtime = server.services.agents.get(agent["name"])
    fitting = _within(runtime, budget["max_message_tokens"])
    assert len(fitting) > 50_000 and message_tokens(runtime, fitting) > WINDOW // 2
    assert turn(client, conversation_id, fitting, timeout=120).status == "succeeded"
    assert turn(client, conversation_id, "谢谢，总结一下", timeout=120).status == "succeeded"
    too_long = HUGE_CHINESE[: len(fitting) + 200]
    response = client.post(f"/api/conversations/{conversation_id}/runs", json={"input": too_long})
    assert response.status_code == 413, response.text[-300:]
