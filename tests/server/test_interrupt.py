"""Human in the loop: `ask_user` interrupts a run (`waiting_input`); resume continues it; cancel ends it."""

from __future__ import annotations

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.runtime.unanswered_calls import unanswered_call_text
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from ctxpress.app.testing.records import query_sql
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import ask_script


def asking_agent() -> AgentDefinition:
    return AgentDefinition(
        name="asker",
        model=ModelSpec(model=ScriptedChatModel(script=ask_script)),
        tools=("ask_user",),
        capabilities=(),
    )


def test_interrupt_then_resume(start_server: ServerFactory) -> None:
    server = start_server(agents=[asking_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)

    asked = send(alice, conversation_id, "ask 你喜欢哪种颜色？")
    run_id = asked["run"]["id"]
    first_part = read_events(alice, run_id)  # the stream ends when the run waits for input
    assert first_part[-1].type == "interrupt"
    interrupt = first_part[-1].data
    assert interrupt["value"] == {"type": "ask_user", "question": "你喜欢哪种颜色？"}
    run = wait_for_status(alice, run_id, {"waiting_input"})
    assert run["interrupts"] == [{"id": interrupt["interrupt_id"], "value": interrupt["value"]}]

    # While it waits, the conversation is busy: a new message queues behind it.
    later = send(alice, conversation_id, "另一个问题")
    assert later["queued"] is True and later["queued_because"] == "waiting_input"
    status = alice.get(f"/api/conversations/{conversation_id}/status").json()
    assert status["reason"] == "waiting_input" and status["active_run_id"] == run_id

    wrong_run = alice.post(f"/api/runs/{later['run']['id']}/resume", json={"value": "x"})
    assert wrong_run.status_code == 409 and wrong_run.json()["error"]["code"] == "run_not_waiting"
    wrong_id = alice.post(f"/api/runs/{run_id}/resume", json={"value": "x", "interrupt_id": "nope"})
    assert wrong_id.status_code == 409 and wrong_id.json()["error"]["code"] == "unknown_interrupt"
    assert alice.post(f"/api/runs/{run_id}/resume", json={}).status_code == 422

    resumed = alice.post(f"/api/runs/{run_id}/resume", json={"value": "蓝色"})
    assert resumed.status_code == 202 and resumed.json()["status"] in ("running", "queued")
    second_part = read_events(alice, run_id, last_event_id=first_part[-1].id)
    assert second_part[0].type == "run_started" and second_part[0].data["resumed"] is True
    assert [e.data["content"] for e in second_part if e.type == "tool_result"] == ["蓝色"]
    assert [e.data["content"] for e in second_part if e.type == "message"] == ["你的回答是：蓝色"]
    assert second_part[-1].type == "run_finished" and second_part[-1].data["status"] == "succeeded"
    assert {e.id for e in first_part}.isdisjoint(e.id for e in second_part)

    assert wait_for_status(alice, later["run"]["id"], {"succeeded"})["status"] == "succeeded"
    rows = query_sql(
        server.services.settings,
        "SELECT role, content FROM messages WHERE conversation_id = :cid ORDER BY id",
        cid=conversation_id,
    )
    # The queued message is in the record from its intake on (S1), between the question and the answer.
    assert [row.role for row in rows] == ["user", "assistant", "user", "tool", "assistant", "assistant"]
    assert rows[2].content == "另一个问题" and rows[3].content == "蓝色"


def test_cancelling_a_waiting_run_answers_its_question_for_the_next_run(start_server: ServerFactory) -> None:
    server = start_server(agents=[asking_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    asked = send(alice, conversation_id, "ask 继续吗？")
    wait_for_status(alice, asked["run"]["id"], {"waiting_input"})

    cancelled = alice.post(f"/api/runs/{asked['run']['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert alice.post(f"/api/runs/{asked['run']['id']}/resume", json={"value": "是"}).status_code == 409

    follow_up = send(alice, conversation_id, "算了，换个话题")
    assert follow_up["started"] is True
    events = read_events(alice, follow_up["run"]["id"])
    assert events[-1].data["status"] == "succeeded"
    state = alice.get(f"/api/conversations/{conversation_id}/state").json()
    kinds = [message["type"] for message in state["values"]["messages"]]
    # The unanswered tool call got a result before the new message, as providers require.
    assert kinds == ["human", "ai", "tool", "human", "ai"]
    assert state["values"]["messages"][2]["data"]["content"] == unanswered_call_text(
        "user_did_not_answer", "zh"
    )
    rows = query_sql(
        server.services.settings,
        "SELECT role FROM messages WHERE conversation_id = :cid ORDER BY id",
        cid=conversation_id,
    )
    # The record is in arrival order: the new message since its intake, the answer to the open call
    # since the run that gave it (the state puts that answer first, as providers require).
    assert [row.role for row in rows] == ["user", "assistant", "user", "tool", "assistant"]
