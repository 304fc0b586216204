"""The writes that accept a message: one statement on PostgreSQL, four on SQLite (issue 17).

The caller holds the conversation lock and has chosen the run's first status. Accepting the message
takes the conversation's next queue place (naming an untitled conversation), inserts the run in
that status, the message in the chat record (S1: there from the moment it is accepted) and the
run's first event (`run_started` or `run_queued`). None of them reads another's result, so on
PostgreSQL they go as one statement (`db.one_statement`): three round trips fewer on the way to
every message's first event.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from langchain_core.messages import BaseMessage
from sqlalchemy import insert
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert

from ctxpress.app.server.db.models import (
    Conversation,
    Message,
    Run,
    RunEvent,
    insert_values,
    table_of,
    utcnow,
)
from ctxpress.app.server.db.one_statement import one_statement, row_insert, row_parameters
from ctxpress.app.server.repositories.conversations import TAKE_QUEUE_SEQ, ConversationRepository
from ctxpress.app.server.repositories.messages import MessageRepository
from ctxpress.app.server.repositories.run_events import NewEvent, RunEventRepository, StoredEvent
from ctxpress.app.server.repositories.runs import RunRepository

__all__ = ["IntakeRepository"]

_RUNS, _MESSAGES, _EVENTS = table_of(Run), table_of(Message), table_of(RunEvent)
_RUN_PREFIX, _MESSAGE_PREFIX, _EVENT_PREFIX = "run_", "message_", "event_"


def _accept_on_postgresql(naming: bool) -> ReturningInsert[int]:
    """The four writes as one statement; `naming`: the queue place's statement also names an
    untitled conversation (`TAKE_QUEUE_SEQ`)."""
    run = row_insert(insert(_RUNS), _RUN_PREFIX, [column.key for column in _RUNS.columns])
    # As `MessageRepository.append`: a message whose id the conversation holds already is not stored again.
    message = row_insert(
        postgresql.insert(_MESSAGES).on_conflict_do_nothing(index_elements=["conversation_id", "lc_id"]),
        _MESSAGE_PREFIX,
        ["conversation_id", "run_id", "role", "lc_id", "content", "payload", "created_at"],
    )
    event = row_insert(insert(_EVENTS), _EVENT_PREFIX, ["run_id", "type", "data", "created_at"])
    return one_statement([TAKE_QUEUE_SEQ[naming], run, message], event.returning(_EVENTS.c.id))


#: By whether the queue place's statement names the conversation (built once, like the parts).
_ACCEPT_ON_POSTGRESQL: Final = MappingProxyType(
    {naming: _accept_on_postgresql(naming) for naming in (False, True)}
)


class IntakeRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def accept(
        self,
        conversation: Conversation,
        run: Run,
        message: BaseMessage,
        first_event: NewEvent,
        *,
        title_if_untitled: str | None,
    ) -> StoredEvent:
        """Store `run` (`RunRepository.new` of `conversation`, at its next queue place), `message`
        and the run's `first_event` in the session's transaction; the stored event."""
        queue_place = ConversationRepository.queue_seq_write(
            conversation, title_if_untitled=title_if_untitled
        )
        runs = RunRepository(self.session)
        connection = await self.session.connection()
        if connection.dialect.name != "postgresql":
            await self.session.execute(queue_place.statement, queue_place.parameters)
            await runs.insert(run)
            await MessageRepository(self.session).append(conversation.id, run.id, message)
            (stored,) = await RunEventRepository(self.session).append(run.id, [first_event])
            return stored
        now = utcnow()
        event_row = RunEventRepository.row(run.id, first_event)
        parameters = {
            **queue_place.parameters,
            **row_parameters(_RUN_PREFIX, insert_values(run)),
            **row_parameters(
                _MESSAGE_PREFIX,
                {**MessageRepository.row(conversation.id, run.id, message), "created_at": now},
            ),
            **row_parameters(_EVENT_PREFIX, {**event_row, "created_at": now}),
        }
        statement = _ACCEPT_ON_POSTGRESQL[bool(title_if_untitled)]
        event_id = (await connection.execute(statement, parameters)).scalar_one()
        runs.inserted(run)
        return StoredEvent(int(event_id), first_event.type, event_row["data"])
