"""Leases: a run whose worker died is failed (not stuck in `running`); a live worker keeps its lease."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.db.models import utcnow
from ctxpress.app.server.repositories.runs import RunLease, RunRepository
from ctxpress.app.server.runtime.container import open_database
from ctxpress.app.server.runtime.locks import conversation_lock
from ctxpress.app.server.runtime.unanswered_calls import LEASE_EXPIRED_ERROR
from ctxpress.app.testing.api import create_conversation, read_events, wait_for_status
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory, SettingsFactory
from .fakes import echo_script


def echo_agent(gate: threading.Event | None = None) -> AgentDefinition:
    return AgentDefinition(
        name="echo",
        model=ModelSpec(model=ScriptedChatModel(script=echo_script, gate=gate)),
        tools=(),
        capabilities=(),
    )


async def leave_a_crashed_run(make_settings: SettingsFactory, conversation_id: str) -> tuple[str, str]:
    """What a crashed process leaves: a `running` run with an expired lease, and a request queued behind it."""
    async with open_database(make_settings()) as database, database.session() as session:
        async with conversation_lock(session, conversation_id) as locked:
            runs = RunRepository(session)
            crashed = await runs.add(locked.conversation, input={"text": "崩溃前", "message_id": "m-crashed"})
            runs.start(crashed, RunLease("dead-host:4242:deadbeef", utcnow() - timedelta(seconds=1)))
            waiting = await runs.add(locked.conversation, input={"text": "排队中", "message_id": "m-waiting"})
        return crashed.id, waiting.id


def test_a_crashed_workers_run_is_failed_at_start(
    start_server: ServerFactory, make_settings: SettingsFactory
) -> None:
    first = start_server(agents=[echo_agent()])
    token = first.create_user("alice")
    conversation_id = create_conversation(first.client(token))
    first.stop()

    crashed_id, waiting_id = asyncio.run(leave_a_crashed_run(make_settings, conversation_id))

    second = start_server(agents=[echo_agent()])
    alice = second.client(token)
    crashed = wait_for_status(alice, crashed_id, {"failed"})
    assert crashed["error"] == LEASE_EXPIRED_ERROR
    events = read_events(alice, crashed_id)
    assert [event.type for event in events] == ["error", "run_finished"]
    assert events[-1].data == {"status": "failed", "error": LEASE_EXPIRED_ERROR}
    # The queue behind it moves on.
    assert wait_for_status(alice, waiting_id, {"succeeded"})["status"] == "succeeded"


def test_the_heartbeat_keeps_a_long_run_alive(start_server: ServerFactory) -> None:
    gate = threading.Event()
    lease = 0.6
    server = start_server(agents=[echo_agent(gate)], run_lease_seconds=lease)
    alice = server.client(server.create_user("alice"))
    accepted = alice.post(
        f"/api/conversations/{create_conversation(alice)}/runs", json={"input": "慢"}
    ).json()
    threading.Event().wait(lease * 4)  # several lease periods: only the heartbeat keeps the run ours
    assert alice.get(f"/api/runs/{accepted['run']['id']}").json()["status"] == "running"
    gate.set()
    assert wait_for_status(alice, accepted["run"]["id"], {"succeeded", "failed"})["status"] == "succeeded"
