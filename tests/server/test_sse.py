"""SSE (S20, S21): `id:` on every event, replay from the stored events with `Last-Event-ID`."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.testing.api import SseEvent, create_conversation, read_events, send, wait_for_status
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script


def echo_agent(gate: threading.Event | None = None) -> AgentDefinition:
    return AgentDefinition(
        name="echo",
        model=ModelSpec(model=ScriptedChatModel(script=echo_script, gate=gate)),
        tools=(),
        capabilities=(),
    )


def test_replay_with_last_event_id(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()])
    alice = server.client(server.create_user("alice"))
    accepted = send(alice, create_conversation(alice), "一段足够长、会分成好几个片段流出来的回答")
    everything = read_events(alice, accepted["run"]["id"])
    types = [event.type for event in everything]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("message_delta") > 2 and "message" in types and "usage" in types
    deltas = "".join(event.data["delta"] for event in everything if event.type == "message_delta")
    assert deltas == next(event.data["content"] for event in everything if event.type == "message")

    cut = everything[3].id
    assert read_events(alice, accepted["run"]["id"], last_event_id=cut) == everything[4:]
    by_query = alice.get(f"/api/runs/{accepted['run']['id']}/events", params={"after": cut})
    assert by_query.status_code == 200 and by_query.text.count("\nevent: ") == len(everything) - 4
    assert read_events(alice, accepted["run"]["id"], last_event_id=everything[-1].id) == []

    bad = alice.get(f"/api/runs/{accepted['run']['id']}/events", headers={"Last-Event-ID": "yesterday"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_last_event_id"


def test_reconnect_during_a_live_run(start_server: ServerFactory) -> None:
    gate = threading.Event()
    server = start_server(agents=[echo_agent(gate)])
    alice = server.client(server.create_user("alice"))
    accepted = send(alice, create_conversation(alice), "断线重连")
    run_id = accepted["run"]["id"]

    # Read the first event of the live stream, then drop the connection.
    seen: list[SseEvent] = []
    with alice.stream("GET", f"/api/runs/{run_id}/events") as response:
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line == "" and "event" in fields:
                seen.append(SseEvent(int(fields["id"]), fields["event"], json.loads(fields["data"])))
                break
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
    assert [event.type for event in seen] == ["run_started"]

    gate.set()
    rest = read_events(alice, run_id, last_event_id=seen[-1].id)
    assert rest[0].id > seen[-1].id and rest[-1].type == "run_finished"
    assert wait_for_status(alice, run_id, {"succeeded"})
    assert [*seen, *rest] == read_events(alice, run_id)


def test_a_failing_model_ends_the_run_with_an_error_event(start_server: ServerFactory) -> None:
    def flaky(messages: Sequence[BaseMessage]) -> AIMessage:
        if "坏" in messages[-1].text:
            raise RuntimeError("upstream model returned 502")
        return echo_script(messages)

    agent = AgentDefinition(
        name="flaky", model=ModelSpec(model=ScriptedChatModel(script=flaky)), tools=(), capabilities=()
    )
    server = start_server(agents=[agent])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    failed = read_events(alice, send(alice, conversation_id, "坏请求")["run"]["id"])
    assert [event.type for event in failed][-2:] == ["error", "run_finished"]
    assert "upstream model returned 502" in failed[-2].data["message"]
    assert failed[-1].data["status"] == "failed"
    # The conversation is free again and the next message works.
    after = read_events(alice, send(alice, conversation_id, "好请求")["run"]["id"])
    assert after[-1].data["status"] == "succeeded"
