"""A run starts from what the transaction that started it committed (issue 17: SQL per turn)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.testing.api import create_conversation, read_events, send
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script

RUN_TASK_PREFIX = "ctxpress-run-"


def test_a_started_run_does_not_read_itself_back(start_server: ServerFactory) -> None:
    """The intake (or the worker's claim) makes the run `running` and stores `run_started` in one
    transaction; the executor takes the run and that event's id from there: up to its first write on
    the chat record (the run's own output) its task reads neither the run nor its events -- for a
    message that starts at once and for one the worker claims from the queue."""
    server = start_server(
        agents=[
            AgentDefinition(
                name="echo", model=ModelSpec(model=ScriptedChatModel(script=echo_script)), capabilities=()
            )
        ],
        max_concurrent_runs=1,
    )
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    by_run_task: dict[str, list[str]] = {}

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        task = asyncio.current_task()
        if task is not None and task.get_name().startswith(RUN_TASK_PREFIX):
            by_run_task.setdefault(task.get_name(), []).append(" ".join(statement.split()).upper())

    engine = server.services.database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        first = send(alice, conversation_id, "第一个问题")
        second = send(alice, conversation_id, "第二个问题")  # queued behind the first
        assert first["started"] is True and second["queued"] is True
        for accepted in (first, second):
            finished = read_events(alice, accepted["run"]["id"])[-1]
            assert finished.type == "run_finished" and finished.data["status"] == "succeeded"
    finally:
        event.remove(engine, "before_cursor_execute", record)

    for accepted in (first, second):
        statements = by_run_task[RUN_TASK_PREFIX + accepted["run"]["id"]]
        first_write = next(i for i, statement in enumerate(statements) if statement.startswith("INSERT"))
        reads_before = [s for s in statements[:first_write] if "FROM RUNS" in s or "FROM RUN_EVENTS" in s]
        assert reads_before == []
