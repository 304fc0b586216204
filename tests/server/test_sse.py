"""SSE (S20, S21): `id:` on every event; durable events replayed from SQL, token deltas live only.

Every test runs on SQLite and PostgreSQL, and with the in-process live bus and with Redis Streams
(the real Redis on 127.0.0.1:6379, a key prefix of its own).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage
from sqlalchemy import event as sqlalchemy_event

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.testing.api import (
    SseEvent,
    create_conversation,
    iter_events,
    read_events,
    send,
    wait_for_status,
)
from ctxpress.app.testing.live_server import LiveServer
from tests.fakes import PacedChatModel, ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script
from .redis_bus import REDIS_URL, redis_prefix

#: A long answer streamed in 6-character chunks: 40 chunks.
LONG_ANSWER = "".join(f"第{index:02d}句流式文本。" for index in range(30))


@pytest.fixture(params=["memory", "redis"])
def bus(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Settings of the live bus: none (in-process) or Redis with a prefix of its own."""
    if request.param == "memory":
        yield {}
        return
    with redis_prefix() as prefix:
        yield {"redis_url": REDIS_URL, "redis_key_prefix": prefix}


def echo_agent(gate: threading.Event | None = None) -> AgentDefinition:
    return AgentDefinition(
        name="echo",
        model=ModelSpec(model=ScriptedChatModel(script=echo_script, gate=gate)),
        tools=(),
        capabilities=(),
    )


def paced_agent(model: PacedChatModel) -> AgentDefinition:
    return AgentDefinition(name="paced", model=ModelSpec(model=model), tools=(), capabilities=())


def long_answer(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage(LONG_ANSWER)


def stored_assistant_texts(client: httpx.Client, conversation_id: str) -> list[str]:
    page = client.get(f"/api/conversations/{conversation_id}/messages").json()
    return [item["content"] for item in page["items"] if item["role"] == "assistant"]


def delta_text(events: list[SseEvent]) -> str:
    return "".join(event.data["delta"] for event in events if event.type == "message_delta")


def test_replay_after_the_run_has_the_stored_events_only(
    start_server: ServerFactory, bus: dict[str, Any]
) -> None:
    server = start_server(agents=[echo_agent()], **bus)
    alice = server.client(server.create_user("alice"))
    accepted = send(alice, create_conversation(alice), "一段足够长、会分成好几个片段流出来的回答")
    run_id = accepted["run"]["id"]
    wait_for_status(alice, run_id, {"succeeded"})
    everything = read_events(alice, run_id)
    types = [event.type for event in everything]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    # The deltas were live only: the finished run's replay has the complete message instead.
    assert "message_delta" not in types and "message" in types and "usage" in types
    assert all(not event.position.is_live for event in everything)

    cut = everything[1].id
    assert read_events(alice, run_id, last_event_id=cut) == everything[2:]
    by_query = alice.get(f"/api/runs/{run_id}/events", params={"after": cut})
    assert by_query.status_code == 200 and by_query.text.count("\nevent: ") == len(everything) - 2
    assert read_events(alice, run_id, last_event_id=everything[-1].id) == []
    # A delta's id (after the last stored event) is a valid place to resume from, too.
    assert read_events(alice, run_id, last_event_id=f"{everything[-1].id}-3") == []

    for bad_id in ("yesterday", "4-", "-4", "4-2-1", "4.5"):
        bad = alice.get(f"/api/runs/{run_id}/events", headers={"Last-Event-ID": bad_id})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_last_event_id"


def test_reconnect_mid_run_gets_every_delta_once(start_server: ServerFactory, bus: dict[str, Any]) -> None:
    """The client drops the stream half-way through the answer and resumes with Last-Event-ID:
    the deltas it missed come from the live buffer, none twice, and their text is the stored message."""
    gate = threading.Event()
    model = PacedChatModel(script=long_answer, pause_after_chunks=20, pause_gate=gate)
    server = start_server(agents=[paced_agent(model)], delta_max_chars=12, **bus)
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    run_id = send(alice, conversation_id, "讲长一点")["run"]["id"]
    assert model.paused.wait(timeout=30)

    first: list[SseEvent] = []
    with alice.stream("GET", f"/api/runs/{run_id}/events") as response:
        for event in iter_events(response):
            first.append(event)
            if len([e for e in first if e.type == "message_delta"]) == 3:
                break  # the connection drops here
    assert first[-1].position.is_live

    rest: list[SseEvent] = []
    with alice.stream(
        "GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": first[-1].id}
    ) as response:
        for event in iter_events(response):
            rest.append(event)
            if len(delta_text(first + rest)) >= 20 * 6 and not gate.is_set():
                gate.set()  # everything streamed so far has arrived: let the model finish
    gate.set()

    everything = first + rest
    positions = [event.position for event in everything]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert rest[-1].type == "run_finished" and rest[-1].data["status"] == "succeeded"
    message = next(event.data["content"] for event in everything if event.type == "message")
    assert delta_text(everything) == message == LONG_ANSWER
    assert stored_assistant_texts(alice, conversation_id) == [LONG_ANSWER]
    # Deltas are coalesced: fewer events than the model's 40 chunks, none over the size limit.
    deltas = [event for event in everything if event.type == "message_delta"]
    assert len(deltas) < 40 and all(len(event.data["delta"]) <= 12 + 6 for event in deltas)


def test_a_failing_model_ends_the_run_with_an_error_event(
    start_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
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
    caplog.set_level(logging.ERROR)
    run_id = send(alice, conversation_id, "坏请求")["run"]["id"]
    failed = read_events(alice, run_id)
    assert [event.type for event in failed][-2:] == ["error", "run_finished"]
    # The log line names the run and its conversation.
    assert f"[run={run_id} conversation={conversation_id}]" in caplog.text
    assert "upstream model returned 502" in failed[-2].data["message"]
    assert failed[-1].data["status"] == "failed"
    # The conversation is free again and the next message works.
    after = read_events(alice, send(alice, conversation_id, "好请求")["run"]["id"])
    assert after[-1].data["status"] == "succeeded"


def test_no_sql_row_per_delta(start_server: ServerFactory) -> None:
    """The stored events of a streamed answer: lifecycle, message, usage — not one row per token."""
    model = PacedChatModel(script=long_answer)
    server = start_server(agents=[paced_agent(model)], delta_max_chars=1)
    alice = server.client(server.create_user("alice"))
    run_id = send(alice, create_conversation(alice), "讲长一点")["run"]["id"]
    live = read_events(alice, run_id)
    assert delta_text(live) == LONG_ANSWER
    stored = read_events(alice, run_id)
    assert [event.type for event in stored] == ["run_started", "message", "usage", "run_finished"]


def test_unknown_run_id_in_stream_is_404(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()])
    alice = server.client(server.create_user("alice"))
    response = alice.get(f"/api/runs/{uuid.uuid4().hex}/events")
    assert response.status_code == 404


def test_a_stored_event_read_while_deltas_are_queued_does_not_skip_them(start_server: ServerFactory) -> None:
    """The follower reads SQL while the bus has already queued deltas published before a stored event
    that read returns (it was committed after them): the deltas still go out, before it, once each."""
    from ctxpress.app.server.runtime.live_events import EventPosition, LiveEvent

    gate = threading.Event()
    model = PacedChatModel(script=long_answer, pause_after_chunks=5, pause_gate=gate)
    server = start_server(agents=[paced_agent(model)])
    alice = server.client(server.create_user("alice"))
    run_id = send(alice, create_conversation(alice), "讲长一点")["run"]["id"]
    assert model.paused.wait(timeout=30)
    log = server.services.events
    reads_of_sql = log._durable_after

    async def follow_with_a_racing_writer() -> list[LiveEvent]:
        newest = (await reads_of_sql(run_id, EventPosition(0)))[1][-1].position.durable_id
        raced = [False]

        async def read_after_a_racing_writer(run: str, cursor: EventPosition) -> Any:
            if not raced[0]:
                raced[0] = True
                # A delta goes out on the bus, then a stored event commits -- before the read.
                log.bus.publish(
                    LiveEvent(run, EventPosition(newest, 10_000), "message_delta", {"delta": "迟到的"})
                )
                await log.emit(run, "custom", {"note": "committed after the delta"})
            return await reads_of_sql(run, cursor)

        log._durable_after = read_after_a_racing_writer  # type: ignore[method-assign]
        seen: list[LiveEvent] = []
        try:
            async for event in log.follow(run_id, after=EventPosition(newest)):
                seen.append(event)
                if event.type == "custom":
                    break
        finally:
            del log._durable_after
        return seen

    seen = server.call(follow_with_a_racing_writer())
    gate.set()
    assert [event.type for event in seen][-2:] == ["message_delta", "custom"], seen
    assert seen[-2].data["delta"] == "迟到的"
    wait_for_status(alice, run_id, {"succeeded"})


def test_a_message_sent_with_its_stream_reads_the_run_in_the_same_request(
    start_server: ServerFactory, bus: dict[str, Any]
) -> None:
    """`POST …/runs/stream`: the intake, answered with the run's stream from its first event (no second
    request); a break continues at `GET` `Location`/events with Last-Event-ID, every delta once."""
    gate = threading.Event()
    model = PacedChatModel(script=long_answer, pause_after_chunks=20, pause_gate=gate)
    server = start_server(agents=[paced_agent(model)], delta_max_chars=12, **bus)
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)

    first: list[SseEvent] = []
    with alice.stream(
        "POST", f"/api/conversations/{conversation_id}/runs/stream", json={"input": "讲长一点"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        run_path = response.headers["location"]
        for event in iter_events(response):
            first.append(event)
            if len([e for e in first if e.type == "message_delta"]) == 3:
                break  # the connection drops here
    assert first[0].type == "run_started" and first[0].data["run_id"] == run_path.rsplit("/", 1)[-1]
    assert alice.get(run_path).json()["status"] == "running"

    rest: list[SseEvent] = []
    with alice.stream("GET", f"{run_path}/events", headers={"Last-Event-ID": first[-1].id}) as response:
        for event in iter_events(response):
            rest.append(event)
            if len(delta_text(first + rest)) >= 20 * 6 and not gate.is_set():
                gate.set()
    gate.set()
    everything = first + rest
    positions = [event.position for event in everything]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert rest[-1].type == "run_finished" and rest[-1].data["status"] == "succeeded"
    assert delta_text(everything) == LONG_ANSWER == stored_assistant_texts(alice, conversation_id)[0]
    # The same stored events as the run's own stream replays.
    stored = [event for event in everything if not event.position.is_live]
    assert read_events(alice, run_path.rsplit("/", 1)[-1]) == stored


def test_a_streamed_message_that_waits_says_so_first(start_server: ServerFactory) -> None:
    gate = threading.Event()
    server = start_server(agents=[echo_agent(gate)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    running = send(alice, conversation_id, "第一个")
    with alice.stream(
        "POST", f"/api/conversations/{conversation_id}/runs/stream", json={"input": "第二个"}
    ) as response:
        events = iter_events(response)
        queued = next(events)
        assert queued.type == "run_queued" and queued.data == {"position": 1, "reason": "running"}
        gate.set()
        rest = list(events)
    assert rest[0].type == "run_started" and rest[-1].type == "run_finished"
    assert wait_for_status(alice, running["run"]["id"], {"succeeded"})["status"] == "succeeded"
    assert stored_assistant_texts(alice, conversation_id) == ["回声：第一个", "回声：第二个"]


def test_a_refused_streamed_message_is_answered_before_any_event(start_server: ServerFactory) -> None:
    server = start_server(agents=[echo_agent()], max_input_chars=10)
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))
    conversation_id = create_conversation(alice)
    path = f"/api/conversations/{conversation_id}/runs/stream"
    too_long = alice.post(path, json={"input": "长" * 11})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "input_too_long"
    not_hers = bob.post(path, json={"input": "你好"})
    assert not_hers.status_code == 404 and not_hers.json()["error"]["code"] == "not_found"
    assert alice.get(f"/api/conversations/{conversation_id}/messages").json()["items"] == []


@contextmanager
def statements_that(server: LiveServer, match: Callable[[str], bool]) -> Iterator[list[str]]:
    """The statements the service runs while the block runs that `match` accepts, in order."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if match(statement):
            seen.append(statement)

    engine = server.services.database.engine.sync_engine
    sqlalchemy_event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sqlalchemy_event.remove(engine, "before_cursor_execute", record)


def stream_one_request(client: httpx.Client, conversation_id: str, text: str) -> list[SseEvent]:
    """Send `text` with `POST …/runs/stream` and read the run's stream to its end."""
    path = f"/api/conversations/{conversation_id}/runs/stream"
    with client.stream("POST", path, json={"input": text}) as response:
        return list(iter_events(response))


def test_a_streamed_message_starts_its_stream_from_the_bus(start_server: ServerFactory) -> None:
    """`POST …/runs/stream`: the in-process bus holds the intake's first event from its commit and
    carries every later event of this process, so the stream never reads the run's events from SQL --
    on SQLite and on PostgreSQL without Redis alike (a run another process executes is found by the
    read after a silence: `tests/reliability/test_live_events.py`). Nor at the end: `run_finished`,
    delivered by the bus, is the run's last event and was committed with its final status (issue 17:
    a transaction less per turn each)."""
    server = start_server(agents=[echo_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    warm_up = send(alice, conversation_id, "预热")  # the first run of a process; not counted
    wait_for_status(alice, warm_up["run"]["id"], {"succeeded"})
    with statements_that(
        server, lambda statement: "FROM run_events" in statement and "run_events.id >" in statement
    ) as event_reads:  # a stream's reads
        streamed = stream_one_request(alice, conversation_id, "一段足够长的问题")
    assert streamed[0].type == "run_started" and streamed[-1].type == "run_finished"
    assert delta_text(streamed) == "回声：一段足够长的问题"
    assert event_reads == []
    stored = [event for event in streamed if not event.position.is_live]
    assert read_events(alice, streamed[0].data["run_id"]) == stored


def test_a_run_read_from_its_intake_request_starts_from_what_the_intake_committed(
    start_server: ServerFactory,
) -> None:
    """`POST …/runs/stream`: the client reads the run from the request that accepted it, so the run
    cannot get ahead of its stream -- its executor starts from the run and the `run_started` id the
    intake committed, without reading them again (issue 17: a transaction less per turn). A run
    accepted by `POST …/runs` still reads them first: that read lets its client's second request, the
    stream, open before the run's first step takes the event loop."""
    server = start_server(agents=[echo_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    warm_up = send(alice, conversation_id, "预热")  # the first run of a process; not counted
    wait_for_status(alice, warm_up["run"]["id"], {"succeeded"})
    # `RunEventRepository.newest_id`: the executor's read at a run's start.
    with statements_that(server, lambda statement: "max(run_events.id)" in statement) as newest_event_reads:
        streamed = stream_one_request(alice, conversation_id, "一段足够长的问题")
        read_in_one_request = len(newest_event_reads)
        posted = send(alice, conversation_id, "再问一句")
        wait_for_status(alice, posted["run"]["id"], {"succeeded"})
    assert streamed[0].type == "run_started" and streamed[-1].type == "run_finished"
    assert streamed[-1].data["status"] == "succeeded"
    assert delta_text(streamed) == "回声：一段足够长的问题"
    assert read_in_one_request == 0
    assert len(newest_event_reads) == 1  # the run accepted by `POST …/runs`
    # Its deltas are positioned after the `run_started` the intake stored, as a read would give.
    first_delta = next(event for event in streamed if event.type == "message_delta")
    assert first_delta.position.durable_id == int(streamed[0].id)
    stored = [event for event in streamed if not event.position.is_live]
    assert read_events(alice, streamed[0].data["run_id"]) == stored


def test_a_stream_checks_its_owner_and_reads_its_events_in_one_transaction(
    start_server: ServerFactory,
) -> None:
    """`GET /api/runs/{id}/events`: one transaction authenticates the caller, checks the run's owner
    and reads the events the client has not seen -- two statements, the run read for the owner of
    the caller's token, then its events; a finished run's replay needs no other. Another user's run
    is a 404 before any event, as before, and a token that is not valid a 401."""
    server = start_server(agents=[echo_agent()])
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))
    run_id = send(alice, create_conversation(alice), "问一句")["run"]["id"]
    wait_for_status(alice, run_id, {"succeeded"})
    transactions: list[int] = []
    statements: list[str] = []

    def record(_conn: Any) -> None:
        transactions.append(1)

    def record_statement(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(" ".join(statement.split()))

    engine = server.services.database.engine.sync_engine
    sqlalchemy_event.listen(engine, "begin", record)
    sqlalchemy_event.listen(engine, "before_cursor_execute", record_statement)
    try:
        replay = read_events(alice, run_id)
    finally:
        sqlalchemy_event.remove(engine, "begin", record)
        sqlalchemy_event.remove(engine, "before_cursor_execute", record_statement)
    assert replay[0].type == "run_started" and replay[-1].type == "run_finished"
    assert len(transactions) == 1  # the token's user, the run and its events
    reads = [statement for statement in statements if statement.startswith("SELECT")]
    assert [read.split(" FROM ", 1)[1].split()[0] for read in reads] == ["runs", "run_events"], reads
    assert "JOIN api_tokens" in reads[0]
    not_his = bob.get(f"/api/runs/{run_id}/events")
    assert not_his.status_code == 404 and not_his.json()["error"]["code"] == "not_found"
    nobody = server.client("cxp_not-a-valid-token")
    assert nobody.get(f"/api/runs/{run_id}/events").status_code == 401
    assert nobody.get(f"/api/runs/{run_id}/events", headers={"Last-Event-ID": "x"}).status_code == 401
