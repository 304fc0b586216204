"""Intake (S18): a busy conversation queues requests FIFO; other conversations are not blocked."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
from sqlalchemy import inspect, update

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.app import create_app
from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import RUN_RUNNING, Conversation, Run, table_of, utcnow
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.runs import RunLease, RunRepository
from ctxpress.app.server.runtime.intake_activity import IntakeActivity
from ctxpress.app.server.runtime.locks import conversation_lock
from ctxpress.app.server.runtime.worker import RunWorker
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from ctxpress.app.testing.live_server import LiveServer
from ctxpress.app.testing.records import add_conversation, query_sql
from tests.cancellation import cancel_after
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory, SettingsFactory
from .fakes import echo_script
from .transactions import watch_transactions


def gated_agent(gate: threading.Event) -> AgentDefinition:
    return AgentDefinition(
        name="echo",
        model=ModelSpec(model=ScriptedChatModel(script=echo_script, gate=gate)),
        tools=(),
        capabilities=(),
    )


def test_requests_queue_fifo_behind_the_active_run(start_server: ServerFactory) -> None:
    gate = threading.Event()
    server = start_server(agents=[gated_agent(gate)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)

    first = send(alice, conversation_id, "一")
    assert first["started"] is True and first["run"]["status"] == "running"
    second = send(alice, conversation_id, "二")
    third = send(alice, conversation_id, "三")
    fourth = send(alice, conversation_id, "四")
    for accepted, position in ((second, 1), (third, 2), (fourth, 3)):
        assert accepted["started"] is False and accepted["queued"] is True
        assert accepted["run"]["status"] == "queued"
        assert accepted["position"] == position and accepted["queued_because"] == "running"

    status = alice.get(f"/api/conversations/{conversation_id}/status").json()
    assert status == {
        "conversation_id": conversation_id,
        "busy": True,
        "reason": "running",
        "active_run_id": first["run"]["id"],
        "queued_runs": 3,
    }

    # A queued request can be withdrawn; it never runs.
    cancelled = alice.post(f"/api/runs/{third['run']['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert alice.post(f"/api/runs/{third['run']['id']}/cancel").json()["error"]["code"] == "run_finished"

    # Another conversation is not held up by this one's queue.
    other_conversation = create_conversation(alice)
    other = send(alice, other_conversation, "别的对话")
    assert other["started"] is True

    gate.set()
    runs = [
        wait_for_status(alice, accepted["run"]["id"], {"succeeded"}) for accepted in (first, second, fourth)
    ]
    assert runs[0]["finished_at"] <= runs[1]["started_at"] and runs[1]["finished_at"] <= runs[2]["started_at"]
    assert wait_for_status(alice, other["run"]["id"], {"succeeded"})

    queued_stream = read_events(alice, second["run"]["id"])
    assert [event.type for event in queued_stream][:2] == ["run_queued", "run_started"]
    assert queued_stream[0].data == {"position": 1, "reason": "running"}
    cancelled_stream = read_events(alice, third["run"]["id"])
    assert [event.type for event in cancelled_stream] == ["run_queued", "run_finished"]
    assert cancelled_stream[-1].data["status"] == "cancelled"

    # The chat record keeps every accepted message from its intake on (S1), the withdrawn one too
    # (its run says it was cancelled); the answers follow in execution order.
    rows = query_sql(
        server.services.settings,
        "SELECT role, content, run_id FROM messages WHERE conversation_id = :cid ORDER BY id",
        cid=conversation_id,
    )
    assert [(row.role, row.content) for row in rows] == [
        ("user", "一"),
        ("user", "二"),
        ("user", "三"),
        ("user", "四"),
        ("assistant", "回声：一"),
        ("assistant", "回声：二"),
        ("assistant", "回声：四"),
    ]
    assert rows[2].run_id == third["run"]["id"]
    assert alice.get(f"/api/conversations/{conversation_id}/status").json()["busy"] is False


def test_runs_wait_for_a_free_worker_slot(start_server: ServerFactory) -> None:
    gate = threading.Event()
    server = start_server(agents=[gated_agent(gate)], max_concurrent_runs=1)
    alice = server.client(server.create_user("alice"))
    first = send(alice, create_conversation(alice), "一")
    second = send(alice, create_conversation(alice), "二")
    assert first["started"] is True
    assert second["queued"] is True and second["queued_because"] == "workers_busy" and second["position"] == 1
    gate.set()
    assert wait_for_status(alice, second["run"]["id"], {"succeeded"})["status"] == "succeeded"


async def _hold_queue_loop(worker: RunWorker) -> None:
    poll_loop = worker._loops[0]
    poll_loop.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await poll_loop


async def _release_queue_loop(worker: RunWorker) -> None:
    worker._loops[0] = asyncio.create_task(worker._poll_loop())
    worker.nudge()


async def _hold_conversation_lock(database: Database, conversation_id: str) -> Callable[[], Awaitable[None]]:
    """Take the conversation's lock in a task of its own (as another process would hold it); returns
    what lets go of it."""
    taken, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with database.session() as session, conversation_lock(session, conversation_id):
            taken.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await taken.wait()

    async def let_go() -> None:
        release.set()
        await holder

    return let_go


def test_a_freed_slot_goes_to_the_oldest_waiting_run(start_server: ServerFactory) -> None:
    """FIFO across conversations (S18): between a run's end and the worker's next look at the queue,
    a new message must not take the freed slot from an older run that waits for one. A finishing run
    hands its slot to the oldest waiting run in its own transaction, but cannot when that run's
    conversation is locked at that moment (by another process, say): then the window is real (a
    client sends its next message the moment its run ends). The test holds the older conversation's
    lock and the worker's queue loop to open it on purpose."""
    gate = threading.Event()
    server = start_server(agents=[gated_agent(gate)], max_concurrent_runs=1)
    alice = server.client(server.create_user("alice"))
    first = send(alice, create_conversation(alice), "一")
    older_conversation = create_conversation(alice)
    older = send(alice, older_conversation, "二")
    assert first["started"] is True and older["queued_because"] == "workers_busy"

    worker = server.services.worker
    server.call(_hold_queue_loop(worker))
    let_go = server.call(_hold_conversation_lock(server.services.database, older_conversation))
    gate.set()
    assert wait_for_status(alice, first["run"]["id"], {"succeeded"})["status"] == "succeeded"
    newer = send(alice, create_conversation(alice), "三")
    assert newer["started"] is False and newer["queued_because"] == "workers_busy"
    assert alice.get(f"/api/runs/{older['run']['id']}").json()["status"] == "queued"

    server.call(let_go())
    server.call(_release_queue_loop(worker))
    older_run = wait_for_status(alice, older["run"]["id"], {"succeeded"})
    newer_run = wait_for_status(alice, newer["run"]["id"], {"succeeded"})
    assert older_run["status"] == newer_run["status"] == "succeeded"
    assert older_run["started_at"] <= newer_run["started_at"]
    # With nothing queued, a message starts at once again.
    assert send(alice, create_conversation(alice), "四")["started"] is True


async def _cancel_as_it_wakes(worker: RunWorker, loop_turns: int) -> bool | None:
    """Wake the worker's queue loop and cancel it `loop_turns` event-loop turns later (`cancel_after`)."""
    poll_loop = asyncio.create_task(worker._poll_loop())
    await asyncio.sleep(0)
    worker.nudge(queued=True)
    return await cancel_after(poll_loop, loop_turns)


def test_the_queue_loop_ends_when_cancelled_just_as_it_is_woken(start_server: ServerFactory) -> None:
    """A stop must end the worker's loops. Python 3.11's `asyncio.wait_for` returns the inner result
    and drops a cancellation that arrives in the turn its inner wait finishes, so a stop landing
    just after a nudge left the loop running (and the service's shutdown waiting on it)."""
    server = start_server(agents=[gated_agent(threading.Event())])
    worker = server.services.worker
    server.call(_hold_queue_loop(worker))
    assert [server.call(_cancel_as_it_wakes(worker, turns)) for turns in range(5)] == [True] * 5
    server.call(_release_queue_loop(worker))


def test_cancel_a_running_run(start_server: ServerFactory) -> None:
    gate = threading.Event()
    server = start_server(agents=[gated_agent(gate)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    running = send(alice, conversation_id, "长任务")
    queued = send(alice, conversation_id, "下一个")
    response = alice.post(f"/api/runs/{running['run']['id']}/cancel")
    assert response.status_code == 200
    finished = wait_for_status(alice, running["run"]["id"], {"cancelled", "failed", "succeeded"})
    assert finished["status"] == "cancelled"
    gate.set()  # the model thread blocked in the gate may now finish; its answer is discarded
    assert wait_for_status(alice, queued["run"]["id"], {"succeeded"})["status"] == "succeeded"
    assert read_events(alice, running["run"]["id"])[-1].data == {"status": "cancelled", "error": None}


#: A write as it appears in SQL, wherever it stands in its statement.
_WRITE = re.compile(r"\b(UPDATE \w+ SET|INSERT INTO \w+)")


def test_an_accepted_message_costs_four_writes_in_one_statement_on_postgresql(
    start_server: ServerFactory, backend: str
) -> None:
    """Intake's transaction (S1, S18): the conversation's queue place and automatic title in one
    statement, the run inserted in its first status (no update of it afterwards), the message, and
    the run's first event (`run_started` or `run_queued`). On PostgreSQL the four go as one statement
    (a round trip each would cost ~0.2 ms of the service's CPU per message); on SQLite one by one."""
    gate = threading.Event()
    server = start_server(agents=[gated_agent(gate)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    try:
        with watch_transactions(server.services.database.engine.sync_engine) as seen:
            started = send(alice, conversation_id, "第一个问题")
            queued = send(alice, conversation_id, "第二个问题")
    finally:
        gate.set()
    assert started["started"] is True and queued["queued"] is True
    intakes = seen.with_write("INSERT INTO runs")
    assert len(intakes) == 2
    for statements in intakes:
        writing = [statement for statement in statements if _WRITE.search(statement)]
        assert len(writing) == (1 if backend == "postgresql" else 4), statements
        assert [write for statement in writing for write in _WRITE.findall(statement)] == [
            "UPDATE conversations SET",
            "INSERT INTO runs",
            "INSERT INTO messages",
            "INSERT INTO run_events",
        ], statements
    [first_event] = query_sql(
        server.services.settings,
        "SELECT type FROM run_events WHERE run_id = :run_id ORDER BY id LIMIT 1",
        run_id=started["run"]["id"],
    )
    assert first_event.type == "run_started"
    assert started["run"]["status"] == "running"
    assert alice.get(f"/api/conversations/{conversation_id}").json()["title"] == "第一个问题"
    wait_for_status(alice, queued["run"]["id"], {"succeeded"})


async def test_a_rename_committed_before_the_intakes_statement_keeps_its_title(database: Database) -> None:
    """The automatic title is decided by the database in the statement that takes the queue place:
    a rename that another transaction committed after the conversation was read still wins."""
    conversation_id = await add_conversation(database)
    async with database.session() as session:
        conversation = await session.get(Conversation, conversation_id)
        assert conversation is not None and conversation.title == ""
        async with database.session() as other:
            await other.execute(
                update(Conversation).where(Conversation.id == conversation_id).values(title="我的名字")
            )
            await other.commit()
        first_place = await ConversationRepository(session).take_queue_seq(
            conversation, title_if_untitled="自动标题"
        )
        second_place = await ConversationRepository(session).take_queue_seq(conversation)
        await session.commit()
    async with database.session() as session:
        stored = await session.get(Conversation, conversation_id)
        assert stored is not None
        assert (stored.title, stored.next_queue_seq) == ("我的名字", first_place + 2)
        assert second_place == first_place + 1


async def test_a_new_run_is_in_the_session_as_the_row_the_database_holds(database: Database) -> None:
    """The intake inserts its run with a prebuilt statement, not the unit of work: the object it
    returns holds every column as stored (defaults included), and later changes to it are saved."""
    conversation_id = await add_conversation(database)
    async with database.session() as session:
        conversation = await session.get(Conversation, conversation_id)
        assert conversation is not None
        lease = RunLease("this process", utcnow() + timedelta(minutes=1))
        run = await RunRepository(session).add(conversation, input={"text": "你好"}, lease=lease)
        state = inspect(run)
        assert state.persistent and not state.expired_attributes and not state.unloaded
        held = {column.key: getattr(run, column.key) for column in table_of(Run).columns}
        assert held["created_at"] is not None and held["cancel_requested"] is False
        assert (held["status"], held["attempts"], held["lease_owner"]) == (RUN_RUNNING, 1, "this process")
        run.error = "changed after the insert"
        await session.commit()
    async with database.session() as session:
        stored = await session.get(Run, held["id"])
        assert stored is not None
        assert {column.key: getattr(stored, column.key) for column in table_of(Run).columns} == {
            **held,
            "error": "changed after the insert",
        }


def echo_conversation(
    start_server: ServerFactory,
) -> tuple[LiveServer, ScriptedChatModel, httpx.Client, str]:
    """A server with one echo agent (its model, to see its calls), alice's client and a conversation."""
    model = ScriptedChatModel(script=echo_script)
    server = start_server(
        agents=[AgentDefinition(name="echo", model=ModelSpec(model=model), tools=(), capabilities=())]
    )
    alice = server.client(server.create_user("alice"))
    return server, model, alice, create_conversation(alice)


@contextlib.contextmanager
def another_intake_in_progress(server: LiveServer) -> Iterator[None]:
    """Inside the block the server is accepting another message, and a run's first step waits for
    it with no bound (`intake_activity`); the intake ends with the block."""
    intake = server.services.runs.intake
    intake.run_start_yield_seconds = 60.0
    began, may_end = threading.Event(), threading.Event()

    async def hold() -> None:
        with intake.accepting():
            began.set()
            await asyncio.to_thread(may_end.wait)

    assert server.loop is not None
    holding = asyncio.run_coroutine_threadsafe(hold(), server.loop)
    try:
        assert began.wait(5)
        yield
    finally:
        may_end.set()
        holding.result(5)


def test_a_started_run_lets_the_messages_being_accepted_go_first(start_server: ServerFactory) -> None:
    """A run's first step waits while this process is accepting other messages (`intake_activity`):
    their answers come first. The wait is bounded; here the bound is lifted to see the order."""
    server, model, alice, conversation_id = echo_conversation(start_server)
    with another_intake_in_progress(server):
        accepted = send(alice, conversation_id, "你好")
        assert accepted["started"] is True and accepted["run"]["status"] == "running"
        time.sleep(0.3)  # long enough for a run that does not wait to call its model
        assert model.calls == []
    assert wait_for_status(alice, accepted["run"]["id"], {"succeeded"})["status"] == "succeeded"
    assert len(model.calls) == 1


async def test_the_wait_for_intakes_is_bounded() -> None:
    intake = IntakeActivity(run_start_yield_seconds=0.05)
    assert await intake.quiet() is True
    with intake.accepting():
        assert await intake.quiet() is False  # the bound, not the end of the intake
    assert await intake.quiet() is True


def test_a_started_run_lets_a_request_waiting_for_its_answer_go_first(make_settings: SettingsFactory) -> None:
    """Not only intakes: any HTTP request counts until its response starts (`RequestActivityMiddleware`)
    -- above all the stream a client opens right after `POST …/runs` answers. The bound is lifted to
    see the order."""
    model = ScriptedChatModel(script=echo_script)
    app = create_app(
        make_settings(),
        agents=[AgentDefinition(name="echo", model=ModelSpec(model=model), tools=(), capabilities=())],
    )
    slow_request_began, slow_request_may_answer = threading.Event(), threading.Event()

    async def slow() -> dict[str, bool]:
        slow_request_began.set()
        await asyncio.to_thread(slow_request_may_answer.wait)
        return {"answered": True}

    app.add_api_route("/test/slow", slow)
    server = LiveServer(app).start()
    try:
        server.services.runs.intake.run_start_yield_seconds = 60.0
        alice = server.client(server.create_user("alice"))
        conversation_id = create_conversation(alice)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(alice.get, "/test/slow")
            assert slow_request_began.wait(5)
            accepted = send(alice, conversation_id, "你好")
            assert accepted["started"] is True
            time.sleep(0.3)  # long enough for a run that does not wait to call its model
            assert model.calls == []
            slow_request_may_answer.set()
            assert answer.result(5).json() == {"answered": True}
        assert wait_for_status(alice, accepted["run"]["id"], {"succeeded"})["status"] == "succeeded"
        assert len(model.calls) == 1
    finally:
        slow_request_may_answer.set()
        server.stop()


async def test_the_wait_ends_once_no_request_has_waited_for_the_settle_time() -> None:
    """A burst's requests come a few milliseconds apart: a gap between two of them is not its end."""
    activity = IntakeActivity(run_start_yield_seconds=5.0, settle_seconds=0.3)
    activity.begin()
    activity.end()
    assert await activity.quiet() is True  # one request on its own: nobody waits once it is answered
    assert activity._unsettled_for() == 0
    activity.begin()  # a second one right after: a burst
    activity.end()
    waiting = asyncio.create_task(activity.quiet())
    await asyncio.sleep(0.1)
    assert not waiting.done(), "a request ended 0.1 s ago: the burst may go on"
    activity.begin()  # the next request of the burst
    await asyncio.sleep(0.1)
    activity.end()
    await asyncio.sleep(0.1)
    assert not waiting.done()
    assert await waiting is True  # 0.3 s after the last request ended


def test_a_run_cancelled_while_it_lets_requests_go_first_ends_cancelled(start_server: ServerFactory) -> None:
    """A cancel can reach a run before its first step, while it waits for the requests in progress
    (`intake_activity`): it ends `cancelled` then and there, not `failed` once its lease runs out."""
    server, model, alice, conversation_id = echo_conversation(start_server)
    with another_intake_in_progress(server):
        accepted = send(alice, conversation_id, "你好")
        assert alice.post(f"/api/runs/{accepted['run']['id']}/cancel").status_code == 200
        finished = wait_for_status(alice, accepted["run"]["id"], {"cancelled", "failed", "succeeded"})
        assert finished["status"] == "cancelled"
        assert read_events(alice, accepted["run"]["id"])[-1].data == {"status": "cancelled", "error": None}
    assert model.calls == []
    # The conversation is free again: the next message runs.
    assert wait_for_status(alice, send(alice, conversation_id, "再来")["run"]["id"], {"succeeded"})[
        "status"
    ] == ("succeeded")


async def test_a_message_on_its_own_makes_no_run_wait_once_answered() -> None:
    """Its request and the intake inside it are one activity, not two that overlap (a burst)."""
    activity = IntakeActivity(run_start_yield_seconds=0.5, settle_seconds=60.0)
    with activity.request_in_progress() as answered:
        with activity.accepting():  # the intake inside the request
            pass
        answered()
    assert await activity.quiet() is True, "no burst: the run it started need not wait"
    # Two intakes outside any request (the tests' stand-in for two messages) right after each
    # other are a burst: the run waits for the settle time, here past its bound.
    with activity.accepting():
        pass
    with activity.accepting():
        pass
    assert await activity.quiet() is False


async def test_a_request_on_its_own_after_a_settled_burst_makes_no_run_wait() -> None:
    activity = IntakeActivity(run_start_yield_seconds=0.5, settle_seconds=0.05)
    for _ in range(2):  # a burst
        with activity.accepting():
            pass
    await asyncio.sleep(0.1)  # settled, though no run asked meanwhile
    with activity.accepting():
        pass
    assert activity._unsettled_for() == 0
