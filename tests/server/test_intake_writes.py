"""The writes that accept a message (issue 17; S1: the message is in the chat record from the moment
it is accepted): the same rows on both databases, whether they go as one statement (PostgreSQL) or
four (SQLite), and none of them when one part fails."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation, Message, Run, RunEvent
from ctxpress.app.server.repositories.intake import IntakeRepository
from ctxpress.app.server.repositories.run_events import NewEvent
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.runtime.locks import conversation_lock
from ctxpress.app.testing.records import add_conversation


async def _accept(
    database: Database, conversation_id: str, text: str, message_id: str, *, queue_seq: int | None = None
) -> tuple[str, int, int]:
    """Accept `text` as a queued run (at `queue_seq` instead of the next place, if given); its run
    id, queue place and first event id."""
    async with database.session() as session, conversation_lock(session, conversation_id) as locked:
        conversation = locked.conversation
        run = RunRepository.new(conversation, input={"text": text, "message_id": message_id})
        if queue_seq is not None:
            run.queue_seq = queue_seq
        stored = await IntakeRepository(session).accept(
            conversation,
            run,
            HumanMessage(content=text, id=message_id),
            NewEvent("run_queued", {"position": 1, "reason": "queued", "text": text}),
            title_if_untitled=f"title of {text}" if not conversation.title else None,
        )
        await session.commit()
    return run.id, run.queue_seq, stored.id


async def _rows(database: Database, conversation_id: str) -> dict[str, Any]:
    async with database.session() as session:
        conversation = await session.get(Conversation, conversation_id)
        assert conversation is not None
        runs = (await session.execute(select(Run).order_by(Run.queue_seq))).scalars().all()
        messages = (await session.execute(select(Message).order_by(Message.id))).scalars().all()
        events = (await session.execute(select(RunEvent).order_by(RunEvent.id))).scalars().all()
        return {
            "title": conversation.title,
            "next_queue_seq": conversation.next_queue_seq,
            "runs": [(run.id, run.queue_seq, run.status, run.input) for run in runs],
            "messages": [(m.run_id, m.role, m.lc_id, m.content) for m in messages],
            "events": [(e.id, e.run_id, e.type, e.data) for e in events],
        }


async def test_an_accepted_message_stores_its_queue_place_run_message_and_event(database: Database) -> None:
    conversation_id = await add_conversation(database)
    place = (await _rows(database, conversation_id))["next_queue_seq"]
    first_run, first_place, first_event = await _accept(database, conversation_id, "第一个问题", "m-1")
    second_run, second_place, second_event = await _accept(database, conversation_id, "second", "m-2")
    rows = await _rows(database, conversation_id)
    assert rows["title"] == "title of 第一个问题", "an untitled conversation is named after its first message"
    assert (first_place, second_place, rows["next_queue_seq"]) == (place, place + 1, place + 2)
    assert rows["runs"] == [
        (first_run, place, "queued", {"text": "第一个问题", "message_id": "m-1"}),
        (second_run, place + 1, "queued", {"text": "second", "message_id": "m-2"}),
    ]
    assert rows["messages"] == [
        (first_run, "user", "m-1", "第一个问题"),
        (second_run, "user", "m-2", "second"),
    ]
    data = {"position": 1, "reason": "queued"}
    assert rows["events"] == [
        (first_event, first_run, "run_queued", {**data, "text": "第一个问题"}),
        (second_event, second_run, "run_queued", {**data, "text": "second"}),
    ], "the returned id is the stored event's"


async def test_a_message_whose_id_is_stored_is_not_stored_again(database: Database) -> None:
    """As `MessageRepository.append` (one behaviour on both databases): the run is accepted, the
    chat record keeps the message it holds."""
    conversation_id = await add_conversation(database)
    await _accept(database, conversation_id, "第一个问题", "m-1")
    run_id, _, _ = await _accept(database, conversation_id, "again", "m-1")
    rows = await _rows(database, conversation_id)
    assert [run[0] for run in rows["runs"]][-1] == run_id
    assert [message[2:] for message in rows["messages"]] == [("m-1", "第一个问题")]


async def test_a_failing_part_stores_none_of_the_intake(database: Database) -> None:
    conversation_id = await add_conversation(database)
    _, taken_place, _ = await _accept(database, conversation_id, "第一个问题", "m-1")
    before = await _rows(database, conversation_id)
    with pytest.raises(IntegrityError):  # the run's insert (the second write) fails: its place is taken
        await _accept(database, conversation_id, "again", "m-2", queue_seq=taken_place)
    assert await _rows(database, conversation_id) == before, "nor the queue place, nor the message or event"
    async with database.session() as session:
        assert (await session.execute(select(func.count()).select_from(Run))).scalar_one() == 1
