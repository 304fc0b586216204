"""Issue 20 item 7 (S1): a reply the user stops mid-stream is kept, once, marked stopped.

Token deltas are live only, so the service itself stores the text streamed so far when the run is
cancelled: in the chat record (`GET …/messages`, with the stopped mark the page shows after a
reload) and in the checkpoint, so both agree and the next turn's model sees its partial reply.
Real service on SQLite and PostgreSQL, with and without the compression middleware; the model streams 6-character chunks and holds half-way.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.runtime.partial_reply import STOPPED_KEY
from ctxpress.app.testing.api import create_conversation, iter_events, send, wait_for_status
from tests.fakes import PacedChatModel

from .support import Recorder, turn
from .test_hostile_values import assert_record_matches_checkpoint

#: A long first answer (40 chunks of 6 characters); later answers are short.
LONG_ANSWER = "".join(f"第{index:02d}句流式文本。" for index in range(30))
SHORT_ANSWER = "好的，接着说。"
CHUNKS_BEFORE_PAUSE = 20


def answer(messages: Sequence[BaseMessage]) -> AIMessage:
    asked = [m for m in messages if isinstance(m, HumanMessage)]
    return AIMessage(LONG_ANSWER if len(asked) == 1 else SHORT_ANSWER)


def paced_agent(model: PacedChatModel, capabilities: tuple[str, ...] = ()) -> AgentDefinition:
    return AgentDefinition(name="paced", model=ModelSpec(model=model), tools=(), capabilities=capabilities)


def streamed_text(client: httpx.Client, run_id: str, chars: int) -> str:
    """Read the run's live deltas until `chars` characters arrived (the model then holds)."""
    text = ""
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        for event in iter_events(response):
            if event.type == "message_delta":
                text += event.data["delta"]
            if len(text) >= chars:
                return text
    raise AssertionError(f"the stream ended after {len(text)} characters")


def assistant_items(client: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    page = client.get(f"/api/conversations/{conversation_id}/messages").json()
    return [item for item in page["items"] if item["role"] == "assistant"]


@pytest.mark.parametrize("capabilities", [(), ("context_compression",)], ids=["plain", "compressing"])
def test_a_stopped_reply_is_kept_once_marked_stopped_and_seen_by_the_next_turn(
    start_server: Any, capabilities: tuple[str, ...]
) -> None:
    gate = threading.Event()
    recorder = Recorder(answer)
    model = PacedChatModel(script=recorder, pause_after_chunks=CHUNKS_BEFORE_PAUSE, pause_gate=gate)
    server = start_server(agents=[paced_agent(model, capabilities)], delta_max_chars=12)
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    try:
        run_id = send(alice, conversation_id, "讲长一点")["run"]["id"]
        assert model.paused.wait(timeout=30)
        partial = streamed_text(alice, run_id, CHUNKS_BEFORE_PAUSE * 6)
        assert partial == LONG_ANSWER[: CHUNKS_BEFORE_PAUSE * 6]
        assert alice.post(f"/api/runs/{run_id}/cancel").status_code == 200
        wait_for_status(alice, run_id, {"cancelled"})
    finally:
        gate.set()  # the model's thread may finish its (abandoned) stream now

    # What a reload shows: the partial text, once, marked stopped; the checkpoint holds the same.
    stored = assistant_items(alice, conversation_id)
    assert [item["content"] for item in stored] == [partial]
    assert stored[0]["run_id"] == run_id
    assert stored[0]["message"]["data"]["response_metadata"][STOPPED_KEY] is True
    assert_record_matches_checkpoint(alice, conversation_id)

    # The next turn works, and its model sees the partial reply before the new question.
    next_turn = turn(alice, conversation_id, "继续")
    assert next_turn.run["status"] == "succeeded"
    seen = recorder.requests[-1]
    assert [type(m).__name__ for m in seen[-3:]] == ["HumanMessage", "AIMessage", "HumanMessage"]
    assert seen[-2].text == partial
    assert [item["content"] for item in assistant_items(alice, conversation_id)] == [partial, SHORT_ANSWER]
    assert_record_matches_checkpoint(alice, conversation_id)


def test_nothing_is_kept_when_no_text_was_streamed(start_server: Any) -> None:
    gate = threading.Event()
    model = PacedChatModel(script=answer, pause_after_chunks=0, pause_gate=gate)
    server = start_server(agents=[paced_agent(model)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    try:
        run_id = send(alice, conversation_id, "讲长一点")["run"]["id"]
        assert model.paused.wait(timeout=30)  # held before its first chunk
        assert alice.post(f"/api/runs/{run_id}/cancel").status_code == 200
        wait_for_status(alice, run_id, {"cancelled"})
    finally:
        gate.set()
    assert assistant_items(alice, conversation_id) == []
    assert_record_matches_checkpoint(alice, conversation_id)
    assert turn(alice, conversation_id, "继续").run["status"] == "succeeded"
