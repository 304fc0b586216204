"""Run intake (S18, intake side), resume and cancel. Each takes the conversation lock (see `locks.py`)."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import (
    RUN_CANCELLED,
    RUN_QUEUED,
    RUN_RUNNING,
    RUN_WAITING_INPUT,
    TERMINAL_RUN_STATUSES,
    Run,
    User,
    is_public_id,
)
from ctxpress.app.server.errors import (
    InputTooLongError,
    InterruptIdRequiredError,
    NotFoundError,
    RunFinishedError,
    RunNotWaitingError,
    UnknownInterruptError,
)
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.intake import IntakeRepository
from ctxpress.app.server.repositories.run_events import NewEvent
from ctxpress.app.server.repositories.runs import BusyState, RunRepository
from ctxpress.app.server.runtime import events
from ctxpress.app.server.runtime.agents import AgentRegistry
from ctxpress.app.server.runtime.events import EventLog
from ctxpress.app.server.runtime.execution import ClaimedRun
from ctxpress.app.server.runtime.intake_activity import IntakeActivity
from ctxpress.app.server.runtime.locks import (
    LockedConversation,
    compressing_refusal,
    compression_holds,
    conversation_lock,
    try_conversation_lock,
)
from ctxpress.app.server.runtime.worker import RunWorker
from ctxpress.app.server.usecases.auth import Caller
from ctxpress.app.server.usecases.conversations import automatic_title
from ctxpress.app.server.usecases.message_limits import MessageBudget, check_message_size, message_budget

WORKERS_BUSY = "workers_busy"
#: The user already has `max_runs_per_user` runs executing on this process (fairness).
USER_RUN_LIMIT = "user_run_limit"


@dataclass(frozen=True)
class Intake:
    """The answer to a new message: started at once, or queued (and why)."""

    run: Run
    started: bool
    #: 1-based place in the conversation's queue when queued.
    position: int | None
    #: "running" | "waiting_input" | "queued" (conversation busy), "workers_busy" (no free slot) or
    #: "user_run_limit" (the user's share of the slots is taken).
    queued_because: str | None
    #: The id of the run's first event as stored (`run_started` or `run_queued`).
    first_event_id: int = 0


@dataclass
class _SlotReservation:
    """Whether intake reserved a worker slot, and for whom (released again if the intake fails)."""

    held: bool = False
    user_id: str = ""


class RunService:
    def __init__(
        self,
        *,
        database: Database,
        intake: IntakeActivity,
        events: EventLog,
        worker: RunWorker,
        agents: AgentRegistry,
        max_input_chars: int,
    ) -> None:
        self.database = database
        self.intake = intake
        self.events = events
        self.worker = worker
        self.agents = agents
        self.max_input_chars = max_input_chars
        #: Each agent's message budget: its system prompt and tools do not change while the service runs.
        self._budgets: dict[str, MessageBudget] = {}

    async def submit(
        self, caller: Caller, conversation_id: str, text: str, *, streamed_here: bool = False
    ) -> Intake:
        """Start a run for the caller's message, or queue it FIFO behind the conversation's active
        run. The caller is authenticated, and the message stored in the chat record, in the
        transaction that accepts the run.

        `streamed_here`: the caller reads the run's events from this request (`POST …/runs/stream`),
        so a run started now cannot get ahead of its stream: it executes from the run and the event
        id this intake committed, without reading them again. A client that opens its stream with a
        second request needs that read: it lets the stream open before the run's first step takes
        the event loop (`RunExecutor._execute`)."""
        slot = _SlotReservation()
        try:
            with self.intake.accepting():
                intake = await self._store(caller, conversation_id, text, slot)
        except BaseException:
            if slot.held:
                self.worker.release_slot(slot.user_id)
            raise
        if intake.started:  # committed as started: it runs here
            claimed = ClaimedRun(intake.run, intake.first_event_id) if streamed_here else None
            self.worker.launch(intake.run.id, conversation_id, slot.user_id, claimed=claimed)
        else:
            self.worker.nudge(queued=True)
        return intake

    async def _store(self, caller: Caller, conversation_id: str, text: str, slot: _SlotReservation) -> Intake:
        """The intake's transaction (when the lock is held: a look, then the wait for it)."""
        async with self.database.session() as session:
            user = await caller.user_in(session)
            if len(text) > self.max_input_chars:
                raise InputTooLongError(f"input is longer than {self.max_input_chars} characters")
            if not is_public_id(conversation_id):
                raise NotFoundError("conversation not found")
            # Usually the lock is free: check, store and start in that one transaction.
            async with try_conversation_lock(session, conversation_id) as locked:
                if locked is not None:
                    if locked.conversation.owner_id != user.id:
                        raise NotFoundError("conversation not found")
                    self._check_size(locked.conversation.agent_name, text)
                    return await self._accept(locked, user, text, slot)
            return await self._submit_to_held_conversation(session, user, conversation_id, text, slot)

    async def _submit_to_held_conversation(
        self, session: AsyncSession, user: User, conversation_id: str, text: str, slot: _SlotReservation
    ) -> Intake:
        """The lock is held (a run starting or ending, a manual compression): look first, then wait."""
        conversation = await ConversationRepository(session).get_owned(conversation_id, user.id)
        if conversation is None:
            raise NotFoundError("conversation not found")
        agent_name = conversation.agent_name
        # (`compression_holds` may end the transaction: the row's attributes are read before.)
        if conversation.compressing_until is not None and await compression_holds(session, conversation_id):
            raise compressing_refusal()  # at once; the lock below refuses one claimed meanwhile
        self._check_size(agent_name, text)  # before anything is stored
        # Hand the connection back before waiting for the lock: waiters holding pool
        # connections starve the holder and every other user (`locks.py`). A manual
        # compression is not waited for: 409 `thread_busy` (`compressing`) with Retry-After.
        await session.rollback()
        async with conversation_lock(session, conversation_id, refuse_while_compressing=True) as locked:
            return await self._accept(locked, user, text, slot)

    def _check_size(self, agent_name: str, text: str) -> None:
        runtime = self.agents.get(agent_name)
        if runtime is None:
            return
        budget = self._budgets.get(agent_name)
        if budget is None:
            budget = self._budgets[agent_name] = message_budget(runtime)
        check_message_size(runtime, text, budget)

    async def _accept(
        self, locked: LockedConversation, user: User, text: str, slot: _SlotReservation
    ) -> Intake:
        """Store the message and its run under the lock; mark it started when the conversation is
        idle and a slot is free (`slot` records the reservation), else queue it (its `run_queued`
        event says why). An untitled conversation is named after the message. The caller's lock
        block commits; the caller launches a started run."""
        session = locked.session
        conversation = locked.conversation
        busy = await locked.busy_state()
        slot.held = busy is None and self.worker.reserve_slot_for_new_message(user.id)
        slot.user_id = user.id
        message = HumanMessage(content=text, id=str(uuid.uuid4()))
        lease = self.worker.new_lease() if slot.held else None
        run = RunRepository.new(conversation, input={"text": text, "message_id": message.id}, lease=lease)
        if slot.held:
            first_event, intake = self.worker.started_event(run), Intake(run, True, None, None)
        else:
            # Under the lock every queued run of the conversation is older than this one: it comes
            # right after them (what `RunRepository.queue_position` would count, without the statement).
            position = (busy.queued_runs if busy else 0) + 1
            queued_because = busy.reason if busy else self._why_no_slot(user.id)
            data = {"position": position, "reason": queued_because}
            first_event, intake = (
                NewEvent(events.RUN_QUEUED_EVENT, data),
                Intake(run, False, position, queued_because),
            )
        # The run in its first status, the conversation's queue place (naming an untitled one after
        # the message), the message -- in the chat record from the moment it is accepted (S1): a run
        # that never starts (queued, cancelled, or failed after a crash) still shows it -- and the
        # run's first event: one statement on PostgreSQL.
        stored = await IntakeRepository(session).accept(
            conversation,
            run,
            message,
            first_event,
            title_if_untitled=automatic_title(text) if not conversation.title else None,
        )
        self.events.stored(session, run.id, [stored])
        return dataclasses.replace(intake, first_event_id=stored.id)

    def _why_no_slot(self, user_id: str) -> str:
        return USER_RUN_LIMIT if self.worker.user_at_limit(user_id) else WORKERS_BUSY

    async def resume(self, user: User, run_id: str, value: Any, interrupt_id: str | None) -> Run:
        """Answer the interrupt(s) of a run in `waiting_input`; it continues where it stopped."""
        run = await self.get_owned(user, run_id)
        async with self.database.session() as session:
            slot_reserved = False
            try:
                async with conversation_lock(session, run.conversation_id):
                    runs = RunRepository(session)
                    current = await runs.get(run_id)
                    if current is None:
                        raise NotFoundError("run not found")
                    if current.status != RUN_WAITING_INPUT:
                        raise RunNotWaitingError(f"the run is {current.status}, not waiting for input")
                    pending_ids = [item["id"] for item in (current.interrupts or {}).get("items", [])]
                    if interrupt_id is not None and interrupt_id not in pending_ids:
                        raise UnknownInterruptError("the run has no pending interrupt with that id")
                    if interrupt_id is None and len(pending_ids) > 1:
                        raise InterruptIdRequiredError(
                            "the run waits for several answers; give interrupt_id",
                            details={"pending": pending_ids},
                        )
                    current.pending_resume = {"value": value, "interrupt_id": interrupt_id}
                    current.interrupts = None
                    slot_reserved = self.worker.reserve_slot(user.id)
                    if slot_reserved:
                        await self.worker.mark_started(session, current)
                    else:
                        current.status = RUN_QUEUED  # still first of its conversation's queue
                    run = current
            except BaseException:
                if slot_reserved:
                    self.worker.release_slot(user.id)
                raise
        if slot_reserved:
            self.worker.launch(run.id, run.conversation_id, user.id)
        else:
            self.worker.nudge(queued=True)
        return run

    async def cancel(self, user: User, run_id: str) -> Run:
        """Queued and waiting runs end at once; a running run is stopped by the worker executing it."""
        run = await self.get_owned(user, run_id)
        async with self.database.session() as session, conversation_lock(session, run.conversation_id):
            runs = RunRepository(session)
            current = await runs.get(run_id)
            if current is None:
                raise NotFoundError("run not found")
            if current.status in TERMINAL_RUN_STATUSES:
                raise RunFinishedError(f"the run already {current.status}")
            if current.status == RUN_RUNNING:
                current.cancel_requested = True
            else:
                runs.finish(current, RUN_CANCELLED)
                await self.events.append(
                    session, run_id, events.RUN_FINISHED, {"status": RUN_CANCELLED, "error": None}
                )
            run = current
        if run.status == RUN_RUNNING:
            # Executing here: stopped now. Elsewhere: announced on the live bus (with Redis, the
            # executing process stops it at once); the flag is seen at its next heartbeat anyway.
            await self.events.bus.request_cancel(run_id)
        self.worker.nudge(queued=True)  # the conversation's next queued run may start now
        return run

    async def get_owned(self, user: User, run_id: str) -> Run:
        async with self.database.session() as session:
            run = await RunRepository(session).get_owned(run_id, user.id)
        if run is None:
            raise NotFoundError("run not found")
        return run

    async def count_queued(self) -> int:
        async with self.database.session() as session:
            return await RunRepository(session).count_queued()

    async def queue_position(self, run: Run) -> int | None:
        async with self.database.session() as session:
            return await RunRepository(session).queue_position(run)

    async def list_for_conversation(self, conversation_id: str, *, limit: int) -> list[Run]:
        async with self.database.session() as session:
            return await RunRepository(session).list_for_conversation(conversation_id, limit=limit)

    async def busy_state(self, conversation_id: str) -> BusyState | None:
        """A snapshot without the lock (for status displays; decisions must take the lock): a manual
        compression holding the conversation first, then its runs."""
        async with self.database.session() as session:
            busy = await RunRepository(session).busy_state(conversation_id)
            if await compression_holds(session, conversation_id):
                return BusyState.compressing(busy.queued_runs if busy else 0)
            return busy
