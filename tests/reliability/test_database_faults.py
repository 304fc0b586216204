"""The database connection drops mid-run (PostgreSQL: every backend of the service is terminated).

The run must end — `failed` with a reason, or `succeeded` if nothing it needed was lost — and never
stay `running`; the service recovers by itself (the next message in the same conversation runs);
the chat record keeps every user message, and the checkpoint and the workdir stay consistent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage

from ctxpress.app.testing.api import send, wait_for_status
from tests.fakes import ScriptedChatModel
from tests.server.fakes import report_tool_script

from .support import (
    TOPICS,
    assert_checkpoint_consistent,
    assert_sql_record_complete,
    kb_agent,
    state_values,
    turn,
    workdir_root,
)

WARM_CONVERSATIONS = 4
TERMINATE_SQL = (
    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
GONE_SQL = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"


def terminate_backends(database_url: str) -> int:
    """Kill every other connection to the service's database, as a failover or a restart would, and
    wait until those backends have exited (their FATAL message sent, their sockets closed): the
    service checks a pooled connection's socket at checkout instead of pinging it (`db/liveness.py`),
    so "dropped" means gone, not a termination signal still in flight."""
    base = database_url.split("?", 1)[0]
    with psycopg.connect(base, autocommit=True) as admin:
        pids = [pid for pid, terminated in admin.execute(TERMINATE_SQL).fetchall() if terminated]
        deadline = time.monotonic() + 10
        while (row := admin.execute(GONE_SQL, (pids,)).fetchone()) and row[0] > 0:
            assert time.monotonic() < deadline, "terminated backends did not exit"
            time.sleep(0.01)
    return len(pids)


async def _hold_connections_at_once(pool: Any, count: int) -> None:
    async def hold(release: asyncio.Event) -> None:
        async with pool.connection() as connection:
            await connection.execute("SELECT 1")
            await release.wait()

    release = asyncio.Event()
    holders = [asyncio.create_task(hold(release)) for _ in range(count)]
    while pool.get_stats().get("pool_size", 0) < count:
        await asyncio.sleep(0.01)
    release.set()
    await asyncio.gather(*holders)


class Gate:
    """Holds a script at its n-th call after being armed, until the test opens the gate."""

    def __init__(self, script: Any, at_call: int = 1) -> None:
        self.script = script
        self.at_call = at_call
        self.calls = 0
        self.armed = False
        self.reached = threading.Event()
        self.opened = threading.Event()

    def __call__(self, messages: Sequence[BaseMessage]) -> AIMessage:
        if self.armed:
            self.calls += 1
        if self.armed and self.calls == self.at_call:
            self.reached.set()
            assert self.opened.wait(30), "the test never opened the gate"
        result: AIMessage = self.script(messages)
        return result


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("where", ["main_model", "summary_model"])
def test_database_drop_mid_run_ends_the_run_and_the_service_recovers(
    start_server: Any, database_url: str, where: str
) -> None:
    main = Gate(report_tool_script, at_call=2)  # the call after the tool result
    summary = Gate(lambda messages: AIMessage("摘要：报告已读。"), at_call=1)
    if where == "main_model":
        agent, _ = kb_agent(main=main)
    else:
        main.at_call = 0  # never held
        agent, _ = kb_agent(main=main, summary=ScriptedChatModel(script=summary, model_name="summarizer"))
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)

    # Warm both connection pools with several connections at once, all of which the drop will kill.
    others = [client.post("/api/conversations", json={}).json()["id"] for _ in range(WARM_CONVERSATIONS)]
    warm = [send(client, other, "预热")["run"]["id"] for other in others]
    for other_run in warm:
        assert wait_for_status(client, other_run, {"succeeded"}, timeout=60)["status"] == "succeeded"

    sent: list[str] = []
    gate = main if where == "main_model" else summary
    gate.armed = True
    run_id = ""
    for topic in TOPICS:
        sent.append(topic)
        run_id = send(client, conversation_id, topic)["run"]["id"]
        deadline = time.monotonic() + 30
        while not gate.reached.is_set():
            run = client.get(f"/api/runs/{run_id}").json()
            if run["status"] in ("succeeded", "failed"):
                break
            assert time.monotonic() < deadline, "the run never reached the gate"
            time.sleep(0.05)
        if gate.reached.is_set():
            break
    assert gate.reached.is_set(), "the premise: the run is held inside the model call"

    # The checkpointer's pool holds several idle connections too, as it does under load.
    pool = server.services.checkpointer.conn
    server.call(_hold_connections_at_once(pool, WARM_CONVERSATIONS))
    assert pool.get_stats()["pool_size"] >= WARM_CONVERSATIONS
    killed = terminate_backends(database_url)
    assert killed >= 1, "the premise: the service had connections to drop"
    gate.opened.set()

    # Never stuck: the run ends within the lease and a few polls.
    finished = wait_for_status(client, run_id, {"succeeded", "failed", "cancelled"}, timeout=60)
    if finished["status"] != "succeeded":
        assert finished["status"] == "failed" and finished["error"], finished
    # The service recovers: no connection killed by the drop is handed out again, so the next
    # messages of this conversation and of the others all complete.
    sent.append("数据库恢复后")
    after = turn(client, conversation_id, sent[-1])
    assert after.status == "succeeded", after.run
    for other in others:
        again = turn(client, other, "恢复后")
        assert again.status == "succeeded", again.run
    values = state_values(client, conversation_id)
    assert_checkpoint_consistent(values, root)
    assert_sql_record_complete(settings, conversation_id, sent)
    assert client.get(f"/api/conversations/{conversation_id}/status").json()["busy"] is False
