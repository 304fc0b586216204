"""Pressure for the status panel (S19, S22), over real HTTP on SQLite and PostgreSQL.

Recorded: every main-model request the middleware sends (its approximate size, split into system
prompt, tool schemas, summary and messages). Estimated: the next model input, from the state read
through the agent's graph. Stale: after a manual compression, until the next main-model call.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.repositories.pressure import PressureRepository
from ctxpress.app.server.repositories.usage import UsageRepository
from ctxpress.app.server.runtime.pressure_recording import pressure_from_event
from ctxpress.app.server.usecases.pressure import RecordedPressure
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from ctxpress.app.testing.records import add_conversation
from ctxpress.config import TOKENS_PER_K, CompressionConfig
from ctxpress.pressure import SUGGEST_COMPRESS_RATIO, RequestPressure
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script
from .test_compress import TURNS, agent_state, compress, context, kb_agent, run_count, talk
from .test_sse import stored_assistant_texts
from .transactions import watch_transactions

BREAKDOWN = ("system", "tools", "summary", "messages")


def figures(event: dict[str, Any]) -> dict[str, Any]:
    """A `context_pressure` SSE event in the shape of the panel's `last_request`."""
    return {
        "total_tokens": event["total"],
        "threshold_tokens": event["threshold"],
        "ratio": event["ratio"],
        "breakdown": {part: event[part] for part in BREAKDOWN},
    }


def without_run(last_request: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in last_request.items() if key not in ("run_id", "recorded_at")}


def test_s22_pressure_recorded_at_each_main_model_call(start_server: ServerFactory) -> None:
    server = start_server(agents=[kb_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    empty = context(alice, conversation_id)
    assert empty["last_request"] is None and empty["stale"] is False and empty["summary"] is None
    assert empty["estimated_tokens"] == sum(empty["breakdown"].values()) > 0  # system + tools already

    run = send(alice, conversation_id, "files 看看工作目录")["run"]
    events = read_events(alice, run["id"])
    pressures = [event.data for event in events if event.type == "context_pressure"]
    # Two main-model calls (tool call, then the answer): one figure each, the second one larger.
    assert len(pressures) == 2 and pressures[0]["total"] < pressures[1]["total"]
    for pressure in pressures:
        assert pressure["total"] == sum(pressure[part] for part in BREAKDOWN)
        assert pressure["threshold"] == 100 * TOKENS_PER_K and pressure["suggest_compress"] is False
        assert pressure["system"] > 0 and pressure["tools"] > 0 and pressure["summary"] == 0

    panel = context(alice, conversation_id)
    assert panel["context_compression"] is True and panel["stale"] is False
    assert panel["last_request"]["run_id"] == run["id"]
    assert without_run(panel["last_request"]) == figures(pressures[-1]), "the last call is what is kept"
    # The estimate is built like the middleware's request: same system prompt and tool schemas…
    for part in ("system", "tools"):
        assert panel["breakdown"][part] == panel["last_request"]["breakdown"][part]
    # …plus what the state gained since: the final answer.
    assert panel["estimated_tokens"] > panel["last_request"]["total_tokens"]
    assert panel["estimated_tokens"] == sum(panel["breakdown"].values())
    assert panel["threshold_tokens"] == 100 * TOKENS_PER_K
    assert panel["ratio"] == panel["estimated_tokens"] / panel["threshold_tokens"]
    assert panel["message_count"] == panel["effective_message_count"] == 4


def test_s22_a_calls_pressure_is_stored_with_the_step_that_answers_it(start_server: ServerFactory) -> None:
    """Issue 17 (SQL transactions per turn): the pressure record of a main-model call and its event
    commit with that call's answer, not in a transaction of their own; the stream keeps the order."""
    server = start_server(agents=[kb_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    with watch_transactions(server.services.database.engine.sync_engine) as seen:
        run = send(alice, conversation_id, "files 看看工作目录")["run"]
        events = read_events(alice, run["id"])
    with_pressure = seen.with_statement("INSERT INTO conversation_pressure")
    assert len(with_pressure) == 2, seen.committed  # two main-model calls
    for statements in with_pressure:
        inserts = {statement.split()[2] for statement in statements if statement.startswith("INSERT INTO")}
        assert {"messages", "usage_records"} <= inserts, statements
    types = [event.type for event in events]
    # Each figure comes before the message of the call it measured.
    assert [t for t in types if t in ("context_pressure", "message")] == [
        "context_pressure",
        "message",
        "context_pressure",
        "message",
    ], types


def test_s19_pressure_before_and_after_compression(start_server: ServerFactory) -> None:
    server = start_server(agents=[kb_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    run_ids = talk(alice, conversation_id, TURNS)

    before = context(alice, conversation_id)
    assert before["stale"] is False and before["summary"] is None and before["breakdown"]["summary"] == 0
    assert before["last_request"]["run_id"] == run_ids[-1]

    result = compress(alice, conversation_id).json()
    assert result["compressed"] is True
    # The compression measured the same request shape the panel estimates.
    assert result["tokens_before"] == before["estimated_tokens"]

    after = context(alice, conversation_id)
    assert after["stale"] is True and after["invalidated_at"] is not None, "S19: the record is stale"
    assert after["last_request"] == before["last_request"], "kept, but no longer describes the state"
    assert after["summary"] == {"cutoff_index": 4, "file_path": result["file_path"], "summary_count": 1}
    assert after["estimated_tokens"] == result["tokens_after"], "the estimate already sees the summary"
    assert after["breakdown"]["summary"] > 0
    assert after["breakdown"]["messages"] < before["breakdown"]["messages"]
    assert after["message_count"] == 6 and after["effective_message_count"] == 3  # summary + 2 kept

    # The next main-model call records a full figure again: not stale, summary included.
    next_run = talk(alice, conversation_id, ["第四个问题：风险评估呢？"])[0]
    current = context(alice, conversation_id)
    assert current["stale"] is False and current["last_request"]["run_id"] == next_run
    assert current["last_request"]["breakdown"]["summary"] == after["breakdown"]["summary"]
    assert current["summary"] == after["summary"]


def test_s22_suggest_compress_flips_at_85_percent(start_server: ServerFactory) -> None:
    first = start_server(agents=[kb_agent()])
    token = first.create_user("alice")
    alice = first.client(token)
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS[:2])
    estimated = context(alice, conversation_id)["estimated_tokens"]
    first.stop()

    # The largest threshold at which the estimate is ≥ 85 % of it, and one token more.
    at_boundary = math.floor(estimated / SUGGEST_COMPRESS_RATIO)
    assert estimated / at_boundary >= SUGGEST_COMPRESS_RATIO > estimated / (at_boundary + 1)
    seen: dict[int, dict[str, Any]] = {}
    for threshold in (at_boundary, at_boundary + 1):
        config = CompressionConfig(summary_keep_messages=2, summary_threshold=threshold / TOKENS_PER_K)
        server = start_server(agents=[kb_agent(compression=config)])
        client = server.client(token)
        state = agent_state(client, conversation_id)
        seen[threshold] = context(client, conversation_id)
        # A hint only: reading it compresses nothing and starts nothing.
        assert agent_state(client, conversation_id) == state and run_count(client, conversation_id) == 2
        server.stop()

    at, below = seen[at_boundary], seen[at_boundary + 1]
    assert at["threshold_tokens"] == at_boundary and at["estimated_tokens"] == estimated
    assert at["ratio"] >= SUGGEST_COMPRESS_RATIO and at["suggest_compress"] is True
    assert below["ratio"] < SUGGEST_COMPRESS_RATIO and below["suggest_compress"] is False
    assert at["suggest_ratio"] == SUGGEST_COMPRESS_RATIO


async def test_s19_pressure_record_and_invalidate(database: Database) -> None:
    conversation_id = await add_conversation(database)
    async with database.session() as session:  # a compression before any recorded call
        await PressureRepository(session).invalidate(conversation_id)
        await session.commit()
    async with database.session() as session:
        nothing = RecordedPressure.of(await PressureRepository(session).get(conversation_id))
    assert nothing.pressure is None and nothing.stale is True

    figure = RequestPressure(total=900, threshold=1024, system=100, tools=200, summary=0, messages=600)
    for stale_after in (False, True, False):
        async with database.session() as session:
            repository = PressureRepository(session)
            if stale_after:
                await repository.invalidate(conversation_id)
            else:
                await repository.record(conversation_id, None, figure)
            await session.commit()
        async with database.session() as session:
            recorded = RecordedPressure.of(await PressureRepository(session).get(conversation_id))
        assert recorded.pressure == figure and recorded.stale is stale_after


def test_s22_only_root_agent_pressure_events_are_recorded() -> None:
    event = {"type": "context_pressure", "total": 10, "threshold": 20, "system": 1, "tools": 2}
    event |= {"summary": 3, "messages": 4, "ratio": 0.5, "suggest_compress": False}
    assert pressure_from_event(event) == RequestPressure(10, 20, 1, 2, 3, 4)
    # A sub-agent's model call (namespaced event) is not the conversation's next input.
    assert pressure_from_event({**event, "namespace": ["tools:abc"]}) is None
    assert pressure_from_event({**event, "total": None}) is None
    assert pressure_from_event({**event, "tools": True}) is None


def test_a_runs_final_answer_is_stored_by_the_transaction_that_finishes_it(
    start_server: ServerFactory,
) -> None:
    """Issue 17 (SQL transactions per turn): the step that records the final answer (a reply that
    calls no tool), with its usage and the pressure of its call, commits with the run's final status
    and `run_finished`, one transaction less per turn; a step that calls a tool is stored at once,
    as before, and the stream's order is unchanged."""
    server = start_server(agents=[kb_agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    with watch_transactions(server.services.database.engine.sync_engine) as seen:
        run = send(alice, conversation_id, "files 看看工作目录")["run"]
        wait_for_status(alice, run["id"], {"succeeded"})
        events = read_events(alice, run["id"])
    finishing = [
        statements
        for statements in seen.with_statement("UPDATE runs SET status")
        if any(
            statement.startswith("UPDATE runs SET") and "finished_at" in statement for statement in statements
        )
    ]
    assert len(finishing) == 1, seen.committed
    inserts = [statement.split()[2] for statement in finishing[0] if statement.startswith("INSERT INTO")]
    assert {"messages", "usage_records", "conversation_pressure"} <= set(inserts), finishing[0]
    # The tool-calling step (and the tool's result) were stored before, each in its own transaction.
    storing_messages = seen.with_write("INSERT INTO messages")
    assert len(storing_messages) == 4, storing_messages  # the question, the call, the result, the answer
    types = [event.type for event in events]
    assert types[-4:] == ["context_pressure", "message", "usage", "run_finished"], types
    assert stored_assistant_texts(alice, conversation_id)[-1] == events[-3].data["content"]


def test_a_final_answer_that_cannot_be_stored_fails_the_run_and_frees_the_conversation(
    start_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the finishing transaction cannot store the last step (here its usage records), the run
    still finishes at once -- failed, saying why, as when a step's own store fails -- instead of
    holding its conversation until its lease expires; the next message runs."""
    # No tool: the answer is the run's only step, stored by the finishing transaction.
    echo = AgentDefinition(
        name="echo", model=ModelSpec(model=ScriptedChatModel(script=echo_script)), tools=(), capabilities=()
    )
    server = start_server(agents=[echo])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    real_add = UsageRepository.add

    async def failing_add(self: UsageRepository, rows: Any) -> None:
        if rows:
            raise RuntimeError("usage table unavailable")

    monkeypatch.setattr(UsageRepository, "add", failing_add)
    run = send(alice, conversation_id, "你好")["run"]
    failed = wait_for_status(alice, run["id"], {"failed", "succeeded"})
    assert failed["status"] == "failed" and "usage table unavailable" in failed["error"]
    events = read_events(alice, run["id"])
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "failed"
    monkeypatch.setattr(UsageRepository, "add", real_add)
    again = send(alice, conversation_id, "再来")["run"]
    assert wait_for_status(alice, again["id"], {"failed", "succeeded"})["status"] == "succeeded"
