"""The service's checkpointers: messages decoded once per process (a run's first model call counts
the objects the last run counted), and one read per manual compression (S19: state is still read and written through the compiled graph), on SQLite and
PostgreSQL.

Oracles: the objects a model call receives, compared by identity with the previous run's; the
token count against a count of the same messages with an empty memo; the graph's state after an
update is the one written; the database is asked for the checkpoint once inside
`one_checkpoint_read()` and every time outside it.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, Send, interrupt

from ctxpress import ContextCompressionMiddleware, LocalWorkdir, TokenCounter
from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.runtime.checkpoints import (
    NODE_TASK_PATH_PREFIX,
    ServicePostgresSaver,
    ServiceSqliteSaver,
    grouped_step_writes,
    one_checkpoint_read,
    open_checkpointer,
)
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from ctxpress.checkpoint_serde import CheckpointSerializer
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory, SettingsFactory
from .fakes import echo_script


async def test_s12_the_next_run_counts_the_messages_the_last_run_read(
    make_settings: SettingsFactory, tmp_path: Any
) -> None:
    """Issue 18 item 13, through a real `create_agent` graph with ctxpress on the service's saver:
    each run starts by reading the thread's checkpoint, and its first model call receives, for every
    message the previous run's calls received (read from its checkpoint, or the question it was
    sent), the very same object -- so the token memo checks identities instead of comparing copies
    -- and the count is the one an empty memo gives for the same messages."""
    settings = make_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    counter = TokenCounter()
    middleware = ContextCompressionMiddleware(workdir=LocalWorkdir(tmp_path / "workdir"), counter=counter)
    model = ScriptedChatModel(script=echo_script)
    async with open_checkpointer(settings.database()) as saver:
        await saver.setup()
        agent = create_agent(
            model, [], system_prompt="你是助手。", middleware=[middleware], checkpointer=saver
        )
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
        for turn in range(4):
            await agent.ainvoke(
                {"messages": [HumanMessage(f"第 {turn} 个问题：" + "内容" * 200, id=f"h{turn}")]}, config
            )
    first_calls = [request[1:] for request in model.requests]  # after the system prompt
    assert [len(request) for request in first_calls] == [1, 3, 5, 7]
    for previous, current in itertools.pairwise(first_calls):
        assert all(again is earlier for again, earlier in zip(current, previous, strict=False))
        assert current[-1] not in previous  # this run's question, sent with its request
    last = first_calls[-1]
    assert counter.count_request(last) == TokenCounter().count_request(list(last))


def _graph(checkpointer: Any) -> Any:
    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"收到 {len(state['messages'])} 条消息")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)


class _CountedReads:
    """Counts the checkpoint reads that reach the database (the saver class below the scope)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, saver: Any) -> None:
        self.count = 0
        database_class = type(saver).__mro__[2]  # ServiceXSaver -> _ScopedReads -> AsyncXSaver
        real = database_class.aget_tuple

        async def counting(this: Any, config: Any) -> Any:
            self.count += 1
            return await real(this, config)

        monkeypatch.setattr(database_class, "aget_tuple", counting)


async def test_s19_checkpoint_read_once_within_the_scope_and_always_outside(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with open_checkpointer(settings.database()) as saver:
        await saver.setup()
        assert isinstance(saver, ServiceSqliteSaver | ServicePostgresSaver)
        assert isinstance(saver.serde, CheckpointSerializer)
        graph = _graph(saver)
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
        for turn in range(3):
            await graph.ainvoke({"messages": [HumanMessage(f"第 {turn} 个问题", id=f"h{turn}")]}, config)
        reads = _CountedReads(monkeypatch, saver)

        await graph.aget_state(config)
        await graph.aget_state(config)
        assert reads.count == 2  # no scope: every read goes to the database

        reads.count = 0
        with one_checkpoint_read():
            snapshot = await graph.aget_state(config)
            assert len(snapshot.values["messages"]) == 6
            updated = await graph.aupdate_state(config, {"messages": [HumanMessage("补充", id="extra")]})
            assert reads.count == 1  # the update's own read was answered from the scope
            after = await graph.aget_state(config)  # written in the scope: read again, and new
            assert reads.count == 2
        assert after.config["configurable"]["checkpoint_id"] == updated["configurable"]["checkpoint_id"]
        assert [m.id for m in after.values["messages"]][-1] == "extra"
        fresh = await graph.aget_state(config)  # the scope is gone: the database has the update
        assert [m.id for m in fresh.values["messages"]] == [m.id for m in after.values["messages"]]
        assert reads.count == 3


def _database_saver_class(backend: str) -> type[Any]:
    """The saver class below `_ScopedReads` for the backend (where reads reach the database)."""
    saver_class = ServiceSqliteSaver if backend == "sqlite" else ServicePostgresSaver
    return saver_class.__mro__[2]


def test_a_run_reads_its_checkpoint_from_the_database_once(
    start_server: ServerFactory, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run reads the thread's latest checkpoint once: its start (calls left open, unsaved steps)
    and the graph's own first read share it, and the end reads the state again only when the stream
    said the run is waiting for an answer (`__interrupt__`); the interrupt tests check that path."""
    server = start_server(
        agents=[
            AgentDefinition(
                name="echo", model=ModelSpec(model=ScriptedChatModel(script=echo_script)), capabilities=()
            )
        ]
    )
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    first = send(alice, conversation_id, "第一个问题")
    read_events(alice, first["run"]["id"])
    wait_for_status(alice, first["run"]["id"], {"succeeded"})

    database_class = _database_saver_class(backend)
    real = database_class.aget_tuple
    reads: list[str] = []

    async def counting(this: Any, config: Any) -> Any:
        reads.append(str(config["configurable"].get("checkpoint_ns") or ""))
        return await real(this, config)

    monkeypatch.setattr(database_class, "aget_tuple", counting)
    second = send(alice, conversation_id, "第二个问题")
    events = read_events(alice, second["run"]["id"])
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "succeeded"
    wait_for_status(alice, second["run"]["id"], {"succeeded"})
    assert reads == [""]
    messages = alice.get(f"/api/conversations/{conversation_id}/messages").json()["items"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]


def _interrupting_graph(checkpointer: Any) -> Any:
    """Two node steps, a fan-out of `Send` tasks, then a node that asks (`interrupt`)."""

    def plan(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("计划", id=f"plan-{len(state['messages'])}")]}

    def fan_out(state: MessagesState) -> list[Send]:
        return [Send("fetch", {"messages": [HumanMessage(f"取 {n}")]}) for n in range(3)]

    def fetch(state: MessagesState) -> dict[str, Any]:
        return {
            "messages": [ToolMessage(state["messages"][-1].text, tool_call_id="c", id=f"t-{uuid.uuid4()}")]
        }

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("继续吗？")
        return {"messages": [AIMessage(f"好：{answer}", id=f"ask-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("fetch", fetch)
    builder.add_node("ask", ask)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["fetch"])
    builder.add_edge("fetch", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=checkpointer)


async def _thread_rows(saver: Any, query: str, thread_id: str) -> list[tuple[Any, ...]]:
    async with saver._cursor() as cursor:
        await cursor.execute(query, (thread_id,))
        return [tuple(row.values()) for row in await cursor.fetchall()]


async def _writes_rows(saver: Any, thread_id: str) -> list[tuple[Any, ...]]:
    query = (
        "SELECT checkpoint_id, task_id, idx, channel FROM checkpoint_writes WHERE thread_id = %s"
        " ORDER BY checkpoint_id, task_id, idx"
    )
    return await _thread_rows(saver, query, thread_id)


async def _checkpoint_rows(saver: Any, thread_id: str) -> list[tuple[Any, ...]]:
    """(inserting transaction, source, step) of each checkpoint of a thread, oldest first."""
    query = (
        "SELECT xmin::text AS tx, metadata ->> 'source' AS source, metadata ->> 'step' AS step"
        " FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id"
    )
    return await _thread_rows(saver, query, thread_id)


async def test_node_step_writes_travel_with_their_checkpoint(
    make_settings: SettingsFactory, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within `grouped_step_writes()` (PostgreSQL) a node step's pending writes are saved in its
    checkpoint's transaction, and the run's input checkpoint in step 0's: the database stores the
    same writes and checkpoints as without the block, an interrupt's writes (no checkpoint follows them) are saved when the block ends, and
    the writes of `Send` tasks (tool calls) are saved at once, each as before."""
    settings = make_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with open_checkpointer(settings.database()) as saver:
        await saver.setup()
        graph = _interrupting_graph(saver)
        database_class = type(saver).__mro__[2]
        real_put_writes = database_class.aput_writes
        saved_at_once: list[str] = []

        async def counting(this: Any, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            saved_at_once.append(task_path)
            await real_put_writes(this, config, writes, task_id, task_path)

        monkeypatch.setattr(database_class, "aput_writes", counting)
        plain, grouped = ({"configurable": {"thread_id": f"{name}-{uuid.uuid4().hex[:8]}"}} for name in "pg")
        await graph.ainvoke({"messages": [HumanMessage("开始", id="h")]}, plain)
        without_block = list(saved_at_once)
        saved_at_once.clear()
        async with grouped_step_writes(saver):
            await graph.ainvoke({"messages": [HumanMessage("开始", id="h")]}, grouped)
        with_block = list(saved_at_once)

        for config in (plain, grouped):  # the interrupt is in the checkpoint: the resume finds it
            state = await graph.aget_state(config)
            assert [pending.value for pending in state.interrupts] == ["继续吗？"]
        if backend == "postgresql":
            assert any(path.startswith(NODE_TASK_PATH_PREFIX) for path in without_block)
            assert with_block and all(not path.startswith(NODE_TASK_PATH_PREFIX) for path in with_block)
            assert sum(path.startswith("~__pregel_push") for path in with_block) == 3  # the Send tasks
            plain_rows = await _writes_rows(saver, plain["configurable"]["thread_id"])
            grouped_rows = await _writes_rows(saver, grouped["configurable"]["thread_id"])
            assert plain_rows, "the premise: pending writes are stored"
            assert sorted(row[2:] for row in grouped_rows) == sorted(row[2:] for row in plain_rows)
            assert len({row[0] for row in grouped_rows}) == len({row[0] for row in plain_rows})
            # The same checkpoints; the input's saved in step 0's transaction (rows that one
            # transaction inserted share their `xmin`).
            plain_checkpoints = await _checkpoint_rows(saver, plain["configurable"]["thread_id"])
            grouped_checkpoints = await _checkpoint_rows(saver, grouped["configurable"]["thread_id"])
            assert [row[1:] for row in grouped_checkpoints] == [row[1:] for row in plain_checkpoints]
            assert grouped_checkpoints[0][1:] == ("input", "-1") and grouped_checkpoints[1][2] == "0"
            assert grouped_checkpoints[0][0] == grouped_checkpoints[1][0]
            assert plain_checkpoints[0][0] != plain_checkpoints[1][0]
            assert len({row[0] for row in grouped_checkpoints}) == len(grouped_checkpoints) - 1
        else:
            # SQLite: the block changes nothing (the Send tasks run concurrently: their order varies).
            assert sorted(with_block) == sorted(without_block)
        for config in (plain, grouped):
            await graph.ainvoke(Command(resume="是"), config)
            state = await graph.aget_state(config)
            assert state.values["messages"][-1].text == "好：是" and not state.interrupts


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
async def test_a_node_steps_writes_reach_its_checkpoint_however_fast_the_stream_is_read(
    make_settings: SettingsFactory, backend: str
) -> None:
    """A node step's writes are handed to the saver in a task that prepares them in a worker thread;
    the step's checkpoint is saved by a later task, which may get there first when the stream's
    reader does not pause (a run whose last step's store waits for the finishing transaction). The
    checkpoint waits for the writes in preparation: each node step's writes are inserted in the
    transaction of the checkpoint that follows them (the rows share their `xmin`), never alone.
    (PostgreSQL only: on SQLite the saver has one connection and the block changes nothing.)"""

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("答", id=f"a-{len(state['messages'])}")]}

    def check(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("核对", id=f"c-{len(state['messages'])}")]}

    settings = make_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with open_checkpointer(settings.database()) as saver:
        await saver.setup()
        builder = StateGraph(MessagesState)
        builder.add_node("answer", answer)
        builder.add_node("check", check)
        builder.add_edge(START, "answer")
        builder.add_edge("answer", "check")
        builder.add_edge("check", END)
        graph = builder.compile(checkpointer=saver)
        thread_id = f"fast-{uuid.uuid4().hex[:8]}"
        config: Any = {"configurable": {"thread_id": thread_id}}
        for turn in range(3):
            async with grouped_step_writes(saver):
                async for _ in graph.astream(
                    {"messages": [HumanMessage(f"问 {turn}", id=f"h-{turn}")]}, config, durability="sync"
                ):
                    pass  # read without pausing
        writes = await _thread_rows(
            saver,
            "SELECT w.xmin::text AS writes_tx, c.xmin::text AS checkpoint_tx FROM checkpoint_writes w"
            " JOIN checkpoints c ON c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns"
            " AND c.parent_checkpoint_id = w.checkpoint_id"
            " WHERE w.thread_id = %s AND w.task_path LIKE '~__pregel_pull%%'",
            thread_id,
        )
    assert len(writes) >= 6, "the premise: each turn's two node steps left writes"
    assert all(writes_tx == checkpoint_tx for writes_tx, checkpoint_tx in writes), writes
