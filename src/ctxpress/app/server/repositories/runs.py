"""Runs and their queue. Every status change happens while the caller holds the conversation lock."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from sqlalchemy import bindparam, exists, func, insert, select, true, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased, make_transient_to_detached

from ctxpress.app.server.db.models import (
    ACTIVE_RUN_STATUSES,
    RUN_QUEUED,
    RUN_RUNNING,
    RUN_WAITING_INPUT,
    ApiToken,
    Conversation,
    Run,
    RunEvent,
    insert_values,
    is_public_id,
    new_id,
    table_of,
    utcnow,
)
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.users import ACTIVE_TOKEN, active_token_parameters

#: "compressing": a manual compression holds the conversation (S18), see `conversations.compressing_until`.
BusyReason = Literal["running", "waiting_input", "queued", "compressing"]
BUSY_COMPRESSING: Final[BusyReason] = "compressing"


@dataclass(frozen=True)
class RunLease:
    """Who executes a running run, and until when unless renewed."""

    owner: str
    until: datetime


@dataclass(frozen=True)
class BusyState:
    """Why a conversation cannot be modified right now (S18: answer `thread_busy`)."""

    reason: BusyReason
    #: The running or waiting run, if any (a conversation can be busy with queued requests only).
    active_run_id: str | None
    queued_runs: int

    @classmethod
    def compressing(cls, queued_runs: int = 0) -> BusyState:
        """A manual compression holds the conversation."""
        return cls(BUSY_COMPRESSING, None, queued_runs)


#: A conversation's active and queued runs in queue order (`busy_state`, read by every message).
_ACTIVE_AND_QUEUED: Final = (
    select(Run.id, Run.status)
    .where(
        Run.conversation_id == bindparam("conversation_id"),
        Run.status.in_((*ACTIVE_RUN_STATUSES, RUN_QUEUED)),
    )
    .order_by(Run.queue_seq)
)

#: A new run, every column given (`add`).
_INSERT_RUN: Final = insert(table_of(Run))

#: A run of a conversation the user owns (`get_owned`: every stream opened by run id reads it).
_OWNED_RUN: Final = (
    select(Run)
    .join(Conversation, Conversation.id == Run.conversation_id)
    .where(Run.id == bindparam("run_id"), Conversation.owner_id == bindparam("owner_id"))
)
#: A run of a conversation that the user of an active token owns (`get_owned_by_token`: a stream's
#: authentication and ownership check in one read).
_RUN_OWNED_BY_TOKEN: Final = (
    select(Run)
    .join(Conversation, Conversation.id == Run.conversation_id)
    .join(ApiToken, ApiToken.user_id == Conversation.owner_id)
    .where(Run.id == bindparam("run_id"), ACTIVE_TOKEN)
)
#: The next queued run of a conversation (`head_of_queue`: read when a run finishes).
_HEAD_OF_QUEUE: Final = (
    select(Run)
    .where(Run.conversation_id == bindparam("conversation_id"), Run.status == RUN_QUEUED)
    .order_by(Run.queue_seq)
    .limit(1)
)


class RunRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(
        self,
        conversation: Conversation,
        *,
        input: dict[str, Any],
        status: str = RUN_QUEUED,
        lease: RunLease | None = None,
        title_if_untitled: str | None = None,
    ) -> Run:
        """A new run at the end of the conversation's FIFO (the caller holds the conversation lock):
        `status`, or started under `lease`. Two statements: the conversation's (which also names an
        untitled one `title_if_untitled`) and the run's insert, already in its first status."""
        run = self.new(conversation, input=input, status=status, lease=lease)
        await ConversationRepository(self.session).take_queue_seq(
            conversation, title_if_untitled=title_if_untitled
        )
        await self.insert(run)
        return run

    @staticmethod
    def new(
        conversation: Conversation,
        *,
        input: dict[str, Any],
        status: str = RUN_QUEUED,
        lease: RunLease | None = None,
    ) -> Run:
        """A run at the conversation's next place in its FIFO (`conversation.next_queue_seq`, which
        `ConversationRepository.queue_seq_write` takes), `status` or started under `lease`, every
        column's value set (`insert_values`); not stored yet."""
        run = Run(
            id=new_id(),
            conversation_id=conversation.id,
            agent_name=conversation.agent_name,
            queue_seq=conversation.next_queue_seq,
            status=status,
            input=input,
            attempts=0,
        )
        if lease is not None:
            RunRepository.start(run, lease)
        insert_values(run)  # the column defaults, set on the object as a flush would
        return run

    async def insert(self, run: Run) -> None:
        """Store a `new` run."""
        # Inserted by a prebuilt statement, then handed to the session as the row it now is: the
        # unit of work's flush of one new object cost more than the insert itself.
        await self.session.execute(_INSERT_RUN, insert_values(run))
        self.inserted(run)

    def inserted(self, run: Run) -> None:
        """A `new` run that a Core statement has just inserted, handed to the session as that row."""
        make_transient_to_detached(run)
        self.session.add(run)

    async def get(self, run_id: str) -> Run | None:
        return await self.session.get(Run, run_id, populate_existing=True)

    async def get_owned(self, run_id: str, owner_id: str) -> Run | None:
        if not is_public_id(run_id):
            return None
        parameters = {"run_id": run_id, "owner_id": owner_id}
        return (await self.session.execute(_OWNED_RUN, parameters)).scalar_one_or_none()

    async def get_owned_by_token(self, run_id: str, token_sha256: str) -> Run | None:
        """The run, if its conversation belongs to the user of the active token with this digest."""
        if not is_public_id(run_id):
            return None
        parameters = {"run_id": run_id, **active_token_parameters(token_sha256)}
        return (await self.session.execute(_RUN_OWNED_BY_TOKEN, parameters)).scalar_one_or_none()

    async def previous(self, run: Run) -> Run | None:
        """The conversation's run queued right before `run`."""
        query = (
            select(Run)
            .where(Run.conversation_id == run.conversation_id, Run.queue_seq < run.queue_seq)
            .order_by(Run.queue_seq.desc())
            .limit(1)
        )
        return (await self.session.execute(query)).scalar_one_or_none()

    async def list_for_conversation(self, conversation_id: str, *, limit: int) -> list[Run]:
        query = (
            select(Run)
            .where(Run.conversation_id == conversation_id)
            .order_by(Run.queue_seq.desc())
            .limit(limit)
        )
        return list((await self.session.execute(query)).scalars())

    async def all_for_conversation(self, conversation_id: str) -> list[Run]:
        """Every run of the conversation, in queue order (oldest first)."""
        query = select(Run).where(Run.conversation_id == conversation_id).order_by(Run.queue_seq)
        return list((await self.session.execute(query)).scalars())

    async def busy_state(self, conversation_id: str) -> BusyState | None:
        rows = (await self.session.execute(_ACTIVE_AND_QUEUED, {"conversation_id": conversation_id})).all()
        active = next((row for row in rows if row.status in ACTIVE_RUN_STATUSES), None)
        queued = sum(1 for row in rows if row.status == RUN_QUEUED)
        if active is not None:
            reason: BusyReason = "running" if active.status == RUN_RUNNING else "waiting_input"
            return BusyState(reason, active.id, queued)
        if queued:
            return BusyState("queued", None, queued)
        return None

    async def queue_position(self, run: Run) -> int | None:
        """1 = next to start; `None` when the run is not queued."""
        if run.status != RUN_QUEUED:
            return None
        query = select(func.count()).where(
            Run.conversation_id == run.conversation_id,
            Run.status == RUN_QUEUED,
            Run.queue_seq <= run.queue_seq,
        )
        return int((await self.session.execute(query)).scalar_one())

    async def head_of_queue(self, conversation_id: str) -> Run | None:
        parameters = {"conversation_id": conversation_id}
        return (await self.session.execute(_HEAD_OF_QUEUE, parameters)).scalar_one_or_none()

    async def ready_queue_heads(
        self, *, limit: int, excluding_owners: Collection[str] = ()
    ) -> list[tuple[str, str]]:
        """(conversation id, owner id) of conversations whose queue head can start: queued runs and
        nothing running or waiting, the longest waiting first; none of `excluding_owners`.

        A hint only (no lock): the claimer re-checks under the conversation lock.
        """
        active = aliased(Run)
        oldest_queued = func.min(Run.created_at)
        query = (
            select(Run.conversation_id, Conversation.owner_id)
            .join(Conversation, Conversation.id == Run.conversation_id)
            .where(
                Run.status == RUN_QUEUED,
                ~exists().where(
                    active.conversation_id == Run.conversation_id, active.status.in_(ACTIVE_RUN_STATUSES)
                ),
            )
            .where(Conversation.owner_id.not_in(list(excluding_owners)) if excluding_owners else true())
            .group_by(Run.conversation_id, Conversation.owner_id)
            .order_by(oldest_queued)
            .limit(limit)
        )
        return [(row[0], row[1]) for row in await self.session.execute(query)]

    async def progress_of(self, run_ids: Collection[str]) -> dict[str, tuple[str, int]]:
        """Each existing run's status and the id of its newest event (0 when it has none), in one
        statement: what a stream needs to know whether it is behind (`silent_streams.py`)."""
        newest = (
            select(func.coalesce(func.max(RunEvent.id), 0)).where(RunEvent.run_id == Run.id).scalar_subquery()
        )
        query = select(Run.id, Run.status, newest).where(Run.id.in_(run_ids))
        return {row[0]: (row[1], int(row[2])) for row in await self.session.execute(query)}

    async def count_queued(self) -> int:
        query = select(func.count()).select_from(Run).where(Run.status == RUN_QUEUED)
        return int((await self.session.execute(query)).scalar_one())

    async def expired_lease_conversation_ids(self, now: datetime, *, limit: int) -> list[str]:
        query = (
            select(Run.conversation_id)
            .where(Run.status == RUN_RUNNING, Run.lease_expires_at < now)
            .distinct()
            .limit(limit)
        )
        return list((await self.session.execute(query)).scalars())

    async def expired_leases(self, conversation_id: str, now: datetime) -> list[Run]:
        query = select(Run).where(
            Run.conversation_id == conversation_id, Run.status == RUN_RUNNING, Run.lease_expires_at < now
        )
        return list((await self.session.execute(query)).scalars())

    async def renew_leases(self, run_ids: list[str], owner: str, until: datetime) -> set[str]:
        """Extend the leases this worker still holds; returns the ids it still holds."""
        if not run_ids:
            return set()
        statement = (
            update(Run)
            .where(Run.id.in_(run_ids), Run.lease_owner == owner, Run.status == RUN_RUNNING)
            .values(lease_expires_at=until)
            .returning(Run.id)
        )
        return set((await self.session.execute(statement)).scalars())

    async def cancel_requested_ids(self, run_ids: list[str]) -> set[str]:
        if not run_ids:
            return set()
        query = select(Run.id).where(Run.id.in_(run_ids), Run.cancel_requested.is_(True))
        return set((await self.session.execute(query)).scalars())

    @staticmethod
    def start(run: Run, lease: RunLease) -> None:
        run.status = RUN_RUNNING
        run.lease_owner = lease.owner
        run.lease_expires_at = lease.until
        run.attempts += 1
        run.started_at = run.started_at or utcnow()

    @staticmethod
    def wait_for_input(run: Run, interrupts: list[dict[str, Any]]) -> None:
        run.status = RUN_WAITING_INPUT
        run.interrupts = {"items": interrupts}
        run.pending_resume = None
        run.lease_owner = None
        run.lease_expires_at = None

    @staticmethod
    def finish(run: Run, status: str, error: str | None = None) -> None:
        run.status = status
        run.error = error
        run.lease_owner = None
        run.lease_expires_at = None
        run.pending_resume = None
        run.finished_at = utcnow()
