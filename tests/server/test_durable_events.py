"""Durable run events written in batches (issue 17): the ids a batch returns -- the ids its events go
live with -- are the ids a replay reads them under, in the order given, on both databases."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event as sqlalchemy_event

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.repositories.run_events import NewEvent, RunEventRepository
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.runtime.locks import conversation_lock
from ctxpress.app.testing.records import add_conversation


async def _add_run(database: Database) -> str:
    conversation_id = await add_conversation(database)
    async with database.session() as session, conversation_lock(session, conversation_id) as locked:
        run = await RunRepository(session).add(locked.conversation, input={"text": "q", "message_id": "m"})
        return run.id


async def test_a_batch_of_events_is_replayed_under_the_ids_it_went_live_with(database: Database) -> None:
    run_id = await _add_run(database)
    inserts: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("INSERT INTO run_events"):
            inserts.append(statement)

    batches = [
        # Equal types and equal data in one batch: only the order tells them apart.
        [NewEvent("message" if n % 3 else "usage", {"n": n % 4, "text": "同" * (n % 5)}) for n in range(25)],
        [NewEvent("run_finished", {"status": "succeeded", "error": None})],
        [],
    ]
    stored = []
    sqlalchemy_event.listen(database.engine.sync_engine, "before_cursor_execute", count)
    try:
        for batch in batches:
            async with database.session() as session:
                stored += await RunEventRepository(session).append(run_id, batch)
                await session.commit()
    finally:
        sqlalchemy_event.remove(database.engine.sync_engine, "before_cursor_execute", count)

    async with database.session() as session:
        replayed = await RunEventRepository(session).after(run_id, 0, limit=100)
    assert [(e.id, e.type, e.data) for e in stored] == [(e.id, e.type, e.data) for e in replayed]
    assert [(e.type, e.data) for e in stored] == [
        (new.type, new.data) for batch in batches for new in batch
    ], "stored in the order given"
    assert [e.id for e in stored] == sorted({e.id for e in stored}), "ids increase in the order given"
    # PostgreSQL takes a batch in one statement (SQLite: one per row, each cheap in process).
    expected = 2 if database.backend == "postgresql" else 26
    assert len(inserts) == expected
