"""Fairness: one user holds at most `max_runs_per_user` of a process's run slots."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.runtime.worker import RunWorker
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .transactions import watch_transactions


class Gates:
    """One gate per message text: the model answers a message once its gate opens."""

    def __init__(self, *names: str) -> None:
        self.events = {name: threading.Event() for name in names}

    def script(self, messages: Sequence[BaseMessage]) -> AIMessage:
        assert self.events[messages[-1].text].wait(timeout=60)
        return AIMessage(f"答：{messages[-1].text}")

    def open(self, *names: str) -> None:
        for name in names or tuple(self.events):
            self.events[name].set()


def gated_agent(gates: Gates) -> AgentDefinition:
    return AgentDefinition(
        name="gated", model=ModelSpec(model=ScriptedChatModel(script=gates.script)), tools=(), capabilities=()
    )


def test_one_user_cannot_take_every_slot(start_server: ServerFactory) -> None:
    gates = Gates("a1", "a2", "a3", "b1", "b2")
    server = start_server(agents=[gated_agent(gates)], max_concurrent_runs=3, max_runs_per_user=2)
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))
    try:
        a1, a2, a3 = (send(alice, create_conversation(alice), text) for text in ("a1", "a2", "a3"))
        assert a1["started"] and a2["started"]
        assert a3["queued"] and a3["queued_because"] == "user_run_limit"
        # Alice's third run left a slot free: Bob's run starts at once.
        b1 = send(bob, create_conversation(bob), "b1")
        assert b1["started"] is True
        b2 = send(bob, create_conversation(bob), "b2")
        assert b2["queued"] and b2["queued_because"] == "workers_busy"

        # A slot frees up: Alice's older run is passed over (she holds two), Bob's starts.
        gates.open("b1")
        assert wait_for_status(bob, b2["run"]["id"], {"running"})["status"] == "running"
        assert alice.get(f"/api/runs/{a3['run']['id']}").json()["status"] == "queued"
        gates.open("a1")
        assert wait_for_status(alice, a3["run"]["id"], {"running"})["status"] == "running"
    finally:
        gates.open()
    for client, accepted in ((alice, a1), (alice, a2), (alice, a3), (bob, b2)):
        assert wait_for_status(client, accepted["run"]["id"], {"succeeded"})["status"] == "succeeded"


def test_a_long_queue_of_one_user_does_not_starve_another(start_server: ServerFactory) -> None:
    """Alice's queued runs are older and more than the worker looks at per claim; Bob's run still
    gets the slot that frees up, because users at their share are left out of the look."""
    names = [f"a{index}" for index in range(8)]
    gates = Gates(*names, "b1", "b2")
    server = start_server(agents=[gated_agent(gates)], max_concurrent_runs=2, max_runs_per_user=1)
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))
    try:
        accepted = [send(alice, create_conversation(alice), name) for name in names]
        assert accepted[0]["started"] and all(a["queued_because"] == "user_run_limit" for a in accepted[1:])
        b1 = send(bob, create_conversation(bob), "b1")
        b2 = send(bob, create_conversation(bob), "b2")
        assert b1["started"] is True and b2["queued_because"] == "user_run_limit"
        gates.open("b1")
        assert wait_for_status(bob, b2["run"]["id"], {"running"})["status"] == "running"
    finally:
        gates.open()
    for accepted_run in accepted:
        assert wait_for_status(alice, accepted_run["run"]["id"], {"succeeded"})["status"] == "succeeded"


def test_a_freed_slot_starts_the_oldest_waiting_run_in_the_finishing_transaction(
    start_server: ServerFactory,
) -> None:
    """Issue 17 (SQL transactions per turn): the run that takes a freed slot -- the oldest waiting
    queue head, whatever its conversation -- is started by the transaction that finishes the run
    before it, with its `run_started` event: no queue read and claim of its own."""
    gates = Gates("a1", "b1", "a2")
    server = start_server(agents=[gated_agent(gates)], max_concurrent_runs=1, max_runs_per_user=1)
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))
    try:
        a1 = send(alice, create_conversation(alice), "a1")
        assert a1["started"] is True
        b1 = send(bob, create_conversation(bob), "b1")
        a2 = send(alice, create_conversation(alice), "a2")
        assert b1["queued_because"] == "workers_busy" and a2["queued"] is True
        with watch_transactions(server.services.database.engine.sync_engine) as seen:
            gates.open("a1")
            assert wait_for_status(bob, b1["run"]["id"], {"running"})["status"] == "running"
            assert alice.get(f"/api/runs/{a2['run']['id']}").json()["status"] == "queued"
            gates.open("b1")
            assert wait_for_status(alice, a2["run"]["id"], {"running"})["status"] == "running"
            gates.open("a2")
            assert wait_for_status(alice, a2["run"]["id"], {"succeeded"})["status"] == "succeeded"
    finally:
        gates.open()
    starting = seen.with_statement("UPDATE runs SET status")
    starts = [t for t in starting if any(_starts_a_run(statement) for statement in t)]
    assert len(starts) == 2, starting  # b1's and a2's
    for statements in starts:
        finishing = [s for s in statements if s.startswith("UPDATE runs SET") and "finished_at" in s]
        assert len(finishing) == 1, statements  # the run before it finished in the same transaction
        assert any(s.startswith("INSERT INTO run_events") for s in statements), statements
    for client, accepted in ((bob, b1), (alice, a2)):
        types = [event.type for event in read_events(client, accepted["run"]["id"])]
        assert types[:2] == ["run_queued", "run_started"] and types[-1] == "run_finished", types


def _starts_a_run(statement: str) -> bool:
    return statement.startswith("UPDATE runs SET") and "attempts" in statement and "lease_owner" in statement


def test_a_run_whose_hand_over_fails_still_finishes_with_its_answer(
    start_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When starting the next run in the finishing transaction fails, that transaction rolls back
    and the run is finished alone -- succeeded, its answer stored -- and the queued run starts as
    before, from the worker's own look at the queue."""
    gates = Gates("a1", "b1")
    server = start_server(agents=[gated_agent(gates)], max_concurrent_runs=1, max_runs_per_user=1)
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))

    async def failing_hand_over(*_args: Any) -> None:
        raise RuntimeError("hand-over unavailable")

    monkeypatch.setattr(RunWorker, "hand_over_slot", failing_hand_over)
    try:
        a1 = send(alice, create_conversation(alice), "a1")
        b1 = send(bob, create_conversation(bob), "b1")
        assert a1["started"] is True and b1["queued"] is True
        gates.open()
        finished = wait_for_status(alice, a1["run"]["id"], {"succeeded", "failed"})
        assert finished["status"] == "succeeded", finished
        assert wait_for_status(bob, b1["run"]["id"], {"succeeded", "failed"})["status"] == "succeeded"
    finally:
        gates.open()
    events = read_events(alice, a1["run"]["id"])
    assert [event.type for event in events][-3:] == ["message", "usage", "run_finished"]
    assert events[-3].data["content"] == "答：a1"
