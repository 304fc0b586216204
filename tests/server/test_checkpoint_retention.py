"""Issue 16: a conversation's checkpoints are pruned to the latest after each run and each manual
compression, on SQLite and PostgreSQL; continuing (interrupt/resume, compression, new turns) works on
what is kept, and what a conversation stores grows linearly with its length.

Figures come from the service's own checkpointer (`runtime/checkpoint_pruning.thread_storage`): the
payload bytes of every checkpoint, blob and pending write of the thread, and of its latest checkpoint.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
from sqlalchemy import text

from ctxpress.app.server.repositories.checkpoint_rows import ThreadStorage
from ctxpress.app.server.runtime.agents import thread_config
from ctxpress.app.server.runtime.checkpoint_pruning import SQLITE_RECLAIM_MIN_FREE_PAGES, thread_storage
from ctxpress.app.server.runtime.checkpoints import SQLITE_JOURNAL_SIZE_LIMIT
from ctxpress.app.server.runtime.locks import conversation_lock
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from ctxpress.app.testing.live_server import LiveServer

from .conftest import ServerFactory
from .test_compress import TURNS, Chat, kb_agent, talk
from .transactions import watch_transactions

#: The linear law of the issue: everything a conversation stores is at most this many times its
#: latest checkpoint, and doubling the conversation at most multiplies the bytes by GROWTH.
MAX_TOTAL_TO_LATEST = 3.0
MAX_GROWTH_ON_DOUBLING = 2.2
LONG_TURNS = 200
#: The SQLite file's own pages (schema, indexes, the shared-memory index of the log).
FILE_OVERHEAD_BYTES = 256 * 1024
#: SQLite's default page size (the service does not change it).
SQLITE_PAGE_BYTES = 4096


def storage(server: LiveServer, conversation_id: str) -> ThreadStorage:
    return server.call(thread_storage(server.services.checkpointer, conversation_id))


def checkpoint_file_bytes(server: LiveServer) -> int:
    """The SQLite checkpoint file with its write-ahead log."""
    path = Path(server.services.settings.database().checkpoint_target)
    return sum(file.stat().st_size for file in path.parent.glob(path.name + "*"))


def test_runs_and_compression_keep_one_checkpoint_and_continue(start_server: ServerFactory) -> None:
    chat = Chat()
    server = start_server(agents=[kb_agent(chat=chat)])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS)
    after_runs = storage(server, conversation_id)
    # Each run wrote several checkpoints (input, model, ...); one is left, and nothing else.
    assert after_runs.checkpoints == 1
    assert after_runs.total_bytes <= MAX_TOTAL_TO_LATEST * after_runs.latest_bytes

    # Interrupt on a pruned thread, resume from what was kept (the pending writes of the latest).
    asked = send(alice, conversation_id, "ask 你喜欢哪种颜色？")
    run_id = asked["run"]["id"]
    assert read_events(alice, run_id)[-1].type == "interrupt"
    wait_for_status(alice, run_id, {"waiting_input"})
    assert storage(server, conversation_id).checkpoints == 1, "pruned while waiting for the answer"
    assert alice.post(f"/api/runs/{run_id}/resume", json={"value": "蓝色"}).status_code == 202
    assert wait_for_status(alice, run_id, {"succeeded"})["status"] == "succeeded"
    assert chat.requests[-1][-1].text == "蓝色", "the resumed run answered the question it asked"

    # Manual compression reads the kept checkpoint, writes a new one, and prunes again (after its
    # answer, in the background).
    before = alice.get(f"/api/conversations/{conversation_id}/state").json()["values"]["messages"]
    compressed = alice.post(f"/api/conversations/{conversation_id}/compress")
    assert compressed.status_code == 200 and compressed.json()["compressed"] is True, compressed.text
    state = alice.get(f"/api/conversations/{conversation_id}/state").json()
    assert state["values"]["messages"] == before, "pruning lost no message of the state"
    assert state["values"]["_summarization_event"]["summary_count"] == 1
    assert state["checkpoint_id"] == compressed.json()["checkpoint_id"]
    server.call(server.services.pruner.wait())
    assert storage(server, conversation_id).checkpoints == 1

    # The next run starts from the compressed state.
    talk(alice, conversation_id, ["压缩之后的问题"])
    assert chat.requests[-1][1].text.startswith(compressed.json()["summary"][:10])
    assert storage(server, conversation_id).checkpoints == 1


def test_background_prune_never_runs_while_the_lock_is_held(start_server: ServerFactory) -> None:
    """The prune after a manual compression runs off the answer's path and takes the conversation's
    lock only if it is free (S18): while someone holds it, nothing is deleted; once it is free, the
    thread is pruned to its latest checkpoint."""
    server = start_server(agents=[kb_agent(chat=Chat())])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS[:1])
    runtime = server.services.agents.get("kb")
    assert runtime is not None
    # A second checkpoint, written as manual compression writes its own.
    server.call(runtime.graph.aupdate_state(thread_config(conversation_id), {"messages": []}))
    assert storage(server, conversation_id).checkpoints == 2
    pruner = server.services.pruner

    async def prune_while_held() -> bool:
        async with server.services.database.session() as session, conversation_lock(session, conversation_id):
            return await pruner.prune_if_free(conversation_id)

    assert server.call(prune_while_held()) is False
    assert storage(server, conversation_id).checkpoints == 2, "pruned under someone else's lock"
    assert server.call(pruner.prune_if_free(conversation_id)) is True
    assert storage(server, conversation_id).checkpoints == 1
    # The thread continues from what was kept.
    talk(alice, conversation_id, ["剪枝之后的问题"])
    assert storage(server, conversation_id).checkpoints == 1


def test_a_runs_end_prunes_in_its_finishing_transaction(start_server: ServerFactory, backend: str) -> None:
    """Issue 17 (SQL transactions per turn): on PostgreSQL the checkpointer's tables are in the
    service's database, and the prune at a run's end is one statement of the transaction that
    records the run's end (LangGraph's `aprune` took two transactions of its own). SQLite keeps its
    checkpoints in a file of their own, pruned through the checkpointer's connection."""
    server = start_server(agents=[kb_agent(chat=Chat())])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    with watch_transactions(server.services.database.engine.sync_engine) as seen:
        talk(alice, conversation_id, TURNS[:1])
    assert storage(server, conversation_id).checkpoints == 1
    pruning = seen.with_statement("WITH latest AS")
    if backend == "sqlite":
        assert pruning == []
        return
    [finishing] = pruning
    assert any(s.startswith("UPDATE runs SET status") for s in finishing), finishing


def _refuse_checkpoint_deletes(server: LiveServer, backend: str) -> None:
    """A trigger that fails every delete of a checkpoint row: each prune fails, all else works."""
    if backend == "sqlite":
        with sqlite3.connect(server.services.settings.database().checkpoint_target) as connection:
            connection.execute(
                "CREATE TRIGGER refuse_prune BEFORE DELETE ON checkpoints "
                "BEGIN SELECT RAISE(ABORT, 'prune refused by the test'); END"
            )
        return

    async def create() -> None:
        async with server.services.database.session() as session:
            await session.execute(
                text(
                    "CREATE FUNCTION refuse_prune() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'prune refused by the test'; END $$"
                )
            )
            await session.execute(
                text(
                    "CREATE TRIGGER refuse_prune BEFORE DELETE ON checkpoints "
                    "FOR EACH ROW EXECUTE FUNCTION refuse_prune()"
                )
            )
            await session.commit()

    server.call(create())


def test_a_failed_prune_loses_nothing_of_the_run(start_server: ServerFactory, backend: str) -> None:
    """A prune that fails is logged and counted; the run it ends still finishes (on PostgreSQL the
    prune's savepoint is rolled back, not the finishing transaction), and the next turns work."""
    server = start_server(agents=[kb_agent(chat=Chat())], metrics_enabled=True)
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS[:1])
    _refuse_checkpoint_deletes(server, backend)
    run_ids = talk(alice, conversation_id, TURNS[1:3])
    for run_id in run_ids:
        assert read_events(alice, run_id)[-1].data == {"status": "succeeded", "error": None}
    assert storage(server, conversation_id).checkpoints > 1, "the prunes failed, as the trigger wants"
    metrics = alice.get("/metrics").text
    assert 'ctxpress_checkpoint_prunes_total{outcome="failed"} 2.0' in metrics, metrics
    messages = alice.get(f"/api/conversations/{conversation_id}/messages").json()["items"]
    assert [m["content"] for m in messages if m["role"] == "user"] == TURNS[:3]


def test_storage_grows_linearly_over_200_turns(start_server: ServerFactory, backend: str) -> None:
    server = start_server(agents=[kb_agent(chat=Chat())])
    token = server.create_user("alice")
    conversation_id = create_conversation(server.client(token))
    figures: dict[int, ThreadStorage] = {}
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as alice:
        for turn in range(1, LONG_TURNS + 1):
            run_id = send(alice, conversation_id, f"第 {turn} 个问题：进度如何？")["run"]["id"]
            assert wait_for_status(alice, run_id, {"succeeded"}, timeout=60)["status"] == "succeeded"
            if turn in (LONG_TURNS // 2, LONG_TURNS):
                figures[turn] = storage(server, conversation_id)
    half, full = figures[LONG_TURNS // 2], figures[LONG_TURNS]
    for figure in (half, full):
        assert figure.checkpoints == 1
        assert figure.total_bytes <= MAX_TOTAL_TO_LATEST * figure.latest_bytes, figure
    assert full.total_bytes <= MAX_GROWTH_ON_DOUBLING * half.total_bytes, (half, full)
    if backend == "sqlite":
        # The file gives pruned pages back once enough are free, and the log is emptied once it
        # passes its limit: the file stays near what is kept, plus those two constant allowances.
        allowance = SQLITE_RECLAIM_MIN_FREE_PAGES * SQLITE_PAGE_BYTES + SQLITE_JOURNAL_SIZE_LIMIT
        assert checkpoint_file_bytes(server) <= 2 * full.total_bytes + FILE_OVERHEAD_BYTES + allowance
