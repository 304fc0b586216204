"""Executing one run: stream the agent's canonical graph, persist messages, events and usage as they come.

The executor owns a run only while it holds the run's lease (`runs.lease_owner`). Its final status
change is made under the conversation lock and only if the lease is still its own, so a run the
recovery sweep already failed is never overwritten.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Durability, StateSnapshot, StreamMode
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import (
    RUN_CANCELLED,
    RUN_FAILED,
    RUN_RUNNING,
    RUN_SUCCEEDED,
    RUN_WAITING_INPUT,
    Run,
    utcnow,
)
from ctxpress.app.server.log_context import run_logging_context
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.repositories.messages import MessageRepository
from ctxpress.app.server.repositories.pressure import PressureRepository
from ctxpress.app.server.repositories.run_events import NewEvent, RunEventRepository
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.repositories.usage import UsageRepository
from ctxpress.app.server.runtime import events
from ctxpress.app.server.runtime.agents import AgentRegistry, AgentRuntime, thread_config
from ctxpress.app.server.runtime.checkpoint_pruning import prune_quietly
from ctxpress.app.server.runtime.checkpoints import grouped_step_writes, one_checkpoint_read
from ctxpress.app.server.runtime.delta_stream import DeltaStream
from ctxpress.app.server.runtime.events import EventLog
from ctxpress.app.server.runtime.intake_activity import IntakeActivity
from ctxpress.app.server.runtime.locks import conversation_lock
from ctxpress.app.server.runtime.partial_reply import PartialReply
from ctxpress.app.server.runtime.pressure_recording import record_pressure_event
from ctxpress.app.server.runtime.stream_mapping import (
    INTERRUPT_UPDATE_KEY,
    MappedItem,
    RecordedMessage,
    StreamMapper,
)
from ctxpress.app.server.runtime.token_tap import TokenTap
from ctxpress.app.server.runtime.unanswered_calls import (
    SERVICE_STOPPED_ERROR,
    conversation_language,
    unanswered_call_text,
    unanswered_reason,
)
from ctxpress.app.server.runtime.usage_recording import UsageCollector, UsageDraft, UsageExclusion
from ctxpress.app.server.serialization import to_jsonable
from ctxpress.summary.event import is_summary_message

logger = logging.getLogger(__name__)

#: Token deltas come from the `TokenTap` callback, not the `messages` mode (`token_tap.py` says why).
STREAM_MODES: Final[list[StreamMode]] = ["updates", "custom"]
#: When a run's checkpoints are written: each step's before the next step starts (not in the
#: background while it runs), so a process killed in a step leaves the checkpoint of every step
#: before it -- what the chat record already holds of them (docs/architecture.md, "Durability").
DURABILITY: Final[Durability] = "sync"
MAX_ERROR_CHARS = 2000

StopReason = Literal["cancelled", "shutdown", "lease_lost"]
#: The worker's part of a run's finishing transaction (`RunWorker.hand_over_slot`): claims the run
#: that takes the slot, in the session given; returns what launches it after the commit. The exit
#: stack is left once the transaction has committed or rolled back.
SlotHandOver = Callable[[AsyncSession, AsyncExitStack], Awaitable[Callable[[], None] | None]]


@dataclass(frozen=True)
class ClaimedRun:
    """A run as the transaction that made it running left it, with the id of its newest event
    (that `run_started`): its executor starts from these instead of reading them again. A queued
    run's claim, or the intake of a run whose client reads it from the same request."""

    run: Run
    newest_event_id: int


@dataclass
class ActiveRun:
    """A run executing in this process."""

    run_id: str
    conversation_id: str
    task: asyncio.Task[None] | None = None
    #: Why the task is being cancelled; None while it runs normally.
    stop_reason: StopReason | None = None
    #: The conversation owner's id (the per-user cap counts it); None when not known.
    user_id: str | None = None
    #: A queued run's state when it was claimed (None: the executor reads it).
    claimed: ClaimedRun | None = None


@dataclass(frozen=True)
class Outcome:
    status: str
    error: str | None = None
    interrupts: list[dict[str, Any]] = field(default_factory=list)


def run_started_data(run: Run, runtime: AgentRuntime | None) -> dict[str, Any]:
    """The `run_started` event of a run that has just become running (`runtime`: its agent, None
    when the agent is not configured -- the executor then fails the run)."""
    return {
        "run_id": run.id,
        "conversation_id": run.conversation_id,
        "agent": runtime.name if runtime else run.agent_name,
        "model": runtime.definition.model.label if runtime else None,
        "builtin_model": runtime.builtin_model if runtime else False,
        "notice": runtime.notice if runtime else None,
        "resumed": run.pending_resume is not None,
        "attempt": run.attempts,
    }


def _stopped_outcome(active: ActiveRun) -> Outcome:
    """How a run the worker stopped ends: `cancelled` on request, `failed` when the service stops
    (a lost lease changes no status and never gets here)."""
    if active.stop_reason == "cancelled":
        return Outcome(RUN_CANCELLED)
    return Outcome(RUN_FAILED, SERVICE_STOPPED_ERROR)


class RunExecutor:
    def __init__(
        self,
        *,
        database: Database,
        intake: IntakeActivity,
        events: EventLog,
        agents: AgentRegistry,
        usage_exclusion: UsageExclusion,
        worker_id: str,
        recursion_limit: int,
        tool_result_preview_chars: int,
        metrics: ServiceMetrics,
        delta_window_seconds: float,
        delta_max_chars: int,
    ) -> None:
        self.database = database
        self.intake = intake
        self.events = events
        self.agents = agents
        self.usage_exclusion = usage_exclusion
        self.worker_id = worker_id
        self.recursion_limit = recursion_limit
        self.tool_result_preview_chars = tool_result_preview_chars
        self.metrics = metrics
        self.delta_window_seconds = delta_window_seconds
        self.delta_max_chars = delta_max_chars

    async def execute(self, active: ActiveRun, *, hand_over: SlotHandOver | None = None) -> None:
        with run_logging_context(active.run_id, active.conversation_id):
            await self._execute(active, hand_over)

    async def _execute(self, active: ActiveRun, hand_over: SlotHandOver | None) -> None:
        # Messages arriving together are answered before runs take the event loop (`intake_activity`).
        stopped_before_start = await self._let_requests_go_first(active)
        run: Run | None
        if active.claimed is not None:
            # A queued run (its stream open for a while), or one whose client reads it from the
            # request that accepted it: one read transaction less per turn.
            run, newest_event_id = active.claimed.run, active.claimed.newest_event_id
            active.claimed = None
        else:
            # Started by its intake: this read is also the moment its request's stream gets to open
            # before the run's first step takes the event loop.
            async with self.database.session() as session:
                run = await RunRepository(session).get(active.run_id)
                # Its events so far (`run_started`, stored when it became running; a resumed run's
                # earlier ones): the deltas to come are positioned after the newest.
                newest_event_id = await RunEventRepository(session).newest_id(active.run_id)
        if run is None or run.status != RUN_RUNNING or run.lease_owner != self.worker_id:
            return
        if stopped_before_start:
            if active.stop_reason == "lease_lost":
                logger.warning("run %s: lease lost to another worker before its first step", run.id)
                return
            await self._finish_storing(run, _stopped_outcome(active), Leftovers(), hand_over)
            return
        runtime = self.agents.get(run.agent_name)
        if runtime is None:
            await self._finish_storing(
                run,
                Outcome(RUN_FAILED, f"agent {run.agent_name!r} is not configured in this service"),
                Leftovers(),
                hand_over,
            )
            return
        collector = UsageCollector(
            main_provider=runtime.main_usage_provider, summary_provider=runtime.summary_usage_provider
        )
        config: RunnableConfig = {
            **thread_config(run.conversation_id),
            "recursion_limit": self.recursion_limit,
            "metadata": {"ctxpress_run_id": run.id},
        }
        waited = _seconds_since(run.created_at)
        self.metrics.queue_wait.observe(_seconds_between(run.created_at, run.started_at))
        deltas = DeltaStream(
            run.id,
            bus=self.events.bus,
            metrics=self.metrics,
            window_seconds=self.delta_window_seconds,
            max_chars=self.delta_max_chars,
            created_at_monotonic=time.monotonic() - waited,
        )
        deltas.note_durable(newest_event_id)
        partial = PartialReply()
        #: `context_pressure` events waiting for the step of their model call (`_stream`).
        waiting: list[MappedItem] = []
        try:
            with self.events.durable_ids_of(run.id, deltas.note_durable):
                try:
                    outcome = await self._stream(run, runtime, config, collector, deltas, partial, waiting)
                finally:
                    deltas.close()
        except asyncio.CancelledError:
            # The worker cancelled this task on purpose (and says why); finish the bookkeeping normally.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if active.stop_reason == "lease_lost":
                logger.warning(
                    "run %s: lease lost to another worker; stopped without a status change", run.id
                )
                return
            outcome = _stopped_outcome(active)
            if outcome.status == RUN_CANCELLED:
                try:
                    await self._keep_partial(run, runtime, partial)
                except Exception:
                    logger.exception("run %s: the stopped reply could not be kept", run.id)
        except Exception as exc:
            logger.exception("run %s failed", run.id)
            outcome = Outcome(RUN_FAILED, _describe_error(exc))
        # What the run has not stored yet: its last step (`_may_end_the_run`), pressure waiting for
        # a step, usage of calls whose step never came.
        await self._finish_storing(run, outcome, Leftovers(list(waiting), collector.drain()), hand_over)

    async def _let_requests_go_first(self, active: ActiveRun) -> bool:
        """Wait for the requests in progress (`IntakeActivity.quiet`); True when the worker stopped
        the run meanwhile (a cancel, a lost lease, the service stopping): it is then finished without
        a step, as one stopped during a step is."""
        yield_started = time.monotonic()
        try:
            await self.intake.quiet()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if active.stop_reason is None or task is None:
                raise  # not the worker's stop
            task.uncancel()
            return True
        finally:
            self.metrics.run_start_yield.observe(time.monotonic() - yield_started)
        return False

    async def _stream(
        self,
        run: Run,
        runtime: AgentRuntime,
        config: RunnableConfig,
        collector: UsageCollector,
        deltas: DeltaStream,
        partial: PartialReply,
        waiting: list[MappedItem],
    ) -> Outcome:
        mapper = StreamMapper(tool_result_preview_chars=self.tool_result_preview_chars)
        compression_started: dict[str, float] = {}

        def on_delta(data: dict[str, Any]) -> None:  # live only, coalesced
            deltas.add(data)
            partial.add(data)

        tapped: RunnableConfig = {**config, "callbacks": [collector, TokenTap(on_delta)]}
        interrupted = False
        # The run holds the conversation's lock (S18): nothing else writes this thread's checkpoint,
        # so `_start`'s read of it also answers the graph's first read (any write forgets it).
        with one_checkpoint_read():
            graph_input = await self._start(run, runtime, mapper)
            self.metrics.first_event.observe(_seconds_since(run.created_at))
            # A node step's pending writes go into its checkpoint's transaction (`checkpoints.py`).
            async with grouped_step_writes(runtime.graph.checkpointer):
                async for namespace, mode, data in runtime.graph.astream(
                    graph_input, tapped, stream_mode=STREAM_MODES, subgraphs=True, durability=DURABILITY
                ):
                    interrupted = interrupted or _announces_interrupt(mode, data)
                    stored: list[MappedItem] = []
                    for item in mapper.map(tuple(namespace), str(mode), data):
                        if isinstance(item, NewEvent) and item.type == events.CONTEXT_COMPRESSION:
                            self._observe_compression(item.data, compression_started)
                        if isinstance(item, RecordedMessage):
                            partial.settled(item.message.id)
                        stored.append(item)
                    if (stored and all(_waits_for_its_step(item) for item in stored)) or _may_end_the_run(
                        tuple(namespace), str(mode), stored
                    ):
                        # Held, one transaction less each: a call's pressure (reported once the model
                        # has answered, just before the call's step) for that step; the graph's usual
                        # last step (with its usage) for the run's finishing transaction -- a step
                        # that follows after all stores it first, below.
                        waiting += stored
                        continue
                    # A node's messages and its model call's usage (after them) in one transaction.
                    drafts = collector.drain() if mode == "updates" else []
                    if stored or drafts:
                        stored = [*waiting, *stored]
                        waiting.clear()
                        deltas.flush()  # the deltas so far go before these events
                        await self._store(run, stored, drafts)
        if not interrupted:
            return Outcome(RUN_SUCCEEDED)
        # The questions (and their ids) as the checkpoint keeps them, the ones of sub-agents included.
        state = await runtime.graph.aget_state(thread_config(run.conversation_id))
        interrupts = [{"id": pending.id, "value": to_jsonable(pending.value)} for pending in state.interrupts]
        return Outcome(RUN_WAITING_INPUT, interrupts=interrupts) if interrupts else Outcome(RUN_SUCCEEDED)

    async def _keep_partial(self, run: Run, runtime: AgentRuntime, partial: PartialReply) -> None:
        """The reply the user stopped: into the checkpoint (as the node that streamed it) and the
        chat record with its `message` event, so both hold the same text (`partial_reply`)."""
        stopped = partial.stopped_message()
        if stopped is None:
            return
        node, message = stopped
        config = thread_config(run.conversation_id)
        await runtime.graph.aupdate_state(config, {"messages": [message]}, as_node=node)
        mapper = StreamMapper(tool_result_preview_chars=self.tool_result_preview_chars)
        announced = [
            NewEvent(event.type, {**event.data, "stopped": True}) if event.type == events.MESSAGE else event
            for event in mapper.message_events(message, node=node)
        ]
        await self._store(run, [RecordedMessage(message, announced)], [])

    def _observe_compression(self, data: dict[str, Any], started: dict[str, float]) -> None:
        self.metrics.compression_event(data)
        level, status = str(data.get("level")), data.get("status")
        if status == "started":
            started[level] = time.monotonic()
        elif level == "l2" and level in started:
            self.metrics.summary_latency.observe(time.monotonic() - started.pop(level))

    async def _start(self, run: Run, runtime: AgentRuntime, mapper: StreamMapper) -> Any:
        """The graph input, and the answers to calls left open (announced atomically). `run_started`
        was stored when the run became running (`RunWorker.mark_started`); the user's message is in
        the chat record since intake (`usecases/runs.py`)."""
        if run.pending_resume is not None:
            interrupt_id = run.pending_resume.get("interrupt_id")
            value = run.pending_resume.get("value")
            return Command(resume={interrupt_id: value} if interrupt_id else value)

        state = await runtime.graph.aget_state(thread_config(run.conversation_id))
        history: list[BaseMessage] = list((state.values or {}).get("messages", []))
        mapper.mark_seen(message.id for message in history)
        # A process that died after a step finished but before its checkpoint was saved leaves the
        # step's messages as pending writes: the state shows them, but the graph drops them when new
        # input arrives. Decide on what the graph keeps, and give lost tool results back.
        lost = _written_by_unsaved_steps(state)
        lost_ids = {message.id for message in lost}
        kept = [message for message in history if message.id not in lost_ids]
        lost_results = {m.tool_call_id: m for m in lost if isinstance(m, ToolMessage)}
        # A run cancelled while waiting for an answer (or killed mid-step) leaves tool calls without
        # results, which most providers reject; answer them before the new message, saying why.
        unanswered = [(i, n) for i, n in _unanswered_tool_calls(kept) if i not in lost_results]
        text = await self._unanswered_text(run, state, kept) if unanswered else ""
        patches: list[BaseMessage] = [
            lost_results.get(call_id)
            or ToolMessage(content=text, tool_call_id=call_id, name=name, id=str(uuid.uuid4()))
            for call_id, name in _unanswered_tool_calls(kept)
        ]
        user_message = HumanMessage(content=run.input["text"], id=run.input["message_id"])
        if not patches:
            return {"messages": [user_message]}
        async with self.database.session() as session:
            messages = MessageRepository(session)
            announced: list[NewEvent] = []
            for patch in patches:
                if await messages.append(run.conversation_id, run.id, patch) is not None:
                    announced += mapper.message_events(patch)
            await self.events.append_all(session, run.id, announced)
            await session.commit()
        return {"messages": [*patches, user_message]}

    async def _unanswered_text(self, run: Run, state: StateSnapshot, history: list[BaseMessage]) -> str:
        async with self.database.session() as session:
            previous = await RunRepository(session).previous(run)
        reason = unanswered_reason(waiting_for_user=bool(state.interrupts), previous_run=previous)
        user_texts = [
            str(m.text) for m in history if isinstance(m, HumanMessage) and not is_summary_message(m)
        ]
        return unanswered_call_text(reason, conversation_language(user_texts or [run.input["text"]]))

    async def _store(self, run: Run, items: list[MappedItem], drafts: list[UsageDraft]) -> None:
        """`_store_in` a transaction of its own."""
        async with self.database.session() as session:
            await self._store_in(session, run, items, drafts)
            await session.commit()

    async def _store_in(
        self, session: AsyncSession, run: Run, items: Sequence[MappedItem], drafts: Sequence[UsageDraft]
    ) -> None:
        """Durable events (with their chat-record messages) and usage records, in the session's
        transaction; the events in one batch, in the order of `items`, then the usage events."""
        if not items and not drafts:
            return
        new_events: list[NewEvent] = []
        for item in items:
            new_events.extend(await self._write(session, run, item))
        await UsageRepository(session).add([draft.to_row(run.conversation_id, run.id) for draft in drafts])
        new_events += [NewEvent(events.USAGE, self.usage_exclusion.event_data(draft)) for draft in drafts]
        await self.events.append_all(session, run.id, new_events)

    async def _write(self, session: AsyncSession, run: Run, item: MappedItem) -> list[NewEvent]:
        """Store what `item` keeps beside its events (a message, the pressure record); its events."""
        if isinstance(item, RecordedMessage):
            record_id = await MessageRepository(session).append(run.conversation_id, run.id, item.message)
            if record_id is None:
                return []  # already in the chat record (and announced) earlier
            return [NewEvent(event.type, {**event.data, "record_id": record_id}) for event in item.events]
        if item.type == events.CONTEXT_PRESSURE:
            # The status panel's record of the last main-model request (S22), with its event.
            await record_pressure_event(PressureRepository(session), run.conversation_id, run.id, item.data)
        return [item]

    async def _finish_storing(
        self, run: Run, outcome: Outcome, leftovers: Leftovers, hand_over: SlotHandOver | None
    ) -> None:
        """`_finish`, storing `leftovers` and handing the run's slot over in its transaction. When
        that fails, the run is finished all the same (logged): without the hand-over (the worker's
        poll starts the next run); then, if the leftovers cannot be stored either, without them:
        failed, with the reason, if they held a reply of the chat record (as when a step's own
        store fails), else with its outcome."""
        if hand_over is not None:
            try:
                await self._finish(run, outcome, leftovers, hand_over)
                return
            except Exception:
                logger.exception(
                    "run %s: finishing with the next run's start failed; finishing alone", run.id
                )
        try:
            await self._finish(run, outcome, leftovers)
        except Exception as exc:
            if not leftovers:
                raise
            logger.exception("run %s: its last step, usage or pressure could not be recorded", run.id)
            if any(isinstance(item, RecordedMessage) for item in leftovers.items):
                outcome = Outcome(RUN_FAILED, _describe_error(exc))
            await self._finish(run, outcome, Leftovers())

    async def _finish(
        self, run: Run, outcome: Outcome, leftovers: Leftovers, hand_over: SlotHandOver | None = None
    ) -> None:
        successor: Callable[[], None] | None = None
        # Left in reverse: the lock block commits, then `until_committed` lets go of what the
        # hand-over holds, then the session closes.
        async with (
            self.database.session() as session,
            AsyncExitStack() as until_committed,
            conversation_lock(session, run.conversation_id),
        ):
            # Before the status: a run that is no longer held here keeps them too (nothing is lost).
            await self._store_in(session, run, leftovers.items, leftovers.drafts)
            runs = RunRepository(session)
            current = await runs.get(run.id)
            if current is None or current.status != RUN_RUNNING or current.lease_owner != self.worker_id:
                logger.warning("run %s: no longer held by this worker; result discarded", run.id)
                return
            # Still holding the lock: no other run or compression of the thread reads its checkpoint.
            await prune_quietly(self.agents.checkpointer, run.conversation_id, self.metrics, session)
            if outcome.status == RUN_WAITING_INPUT:
                runs.wait_for_input(current, outcome.interrupts)
                final = [
                    NewEvent(events.INTERRUPT, {"interrupt_id": pending["id"], "value": pending["value"]})
                    for pending in outcome.interrupts
                ]
            else:
                runs.finish(current, outcome.status, outcome.error)
                self.metrics.runs_finished.labels(outcome=outcome.status).inc()
                final = [NewEvent(events.ERROR, {"message": outcome.error})] if outcome.error else []
                final.append(
                    NewEvent(events.RUN_FINISHED, {"status": outcome.status, "error": outcome.error})
                )
            await self.events.append_all(session, run.id, final)
            if hand_over is not None:
                successor = await hand_over(session, until_committed)
        if successor is not None:
            successor()


@dataclass(frozen=True)
class Leftovers:
    """What a run's finishing transaction stores before the run's final status and events."""

    items: list[MappedItem] = field(default_factory=list)
    drafts: list[UsageDraft] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.items or self.drafts)


def _may_end_the_run(namespace: tuple[str, ...], mode: str, items: Sequence[MappedItem]) -> bool:
    """A step of the top graph that records a reply calling no tool: after it the graph usually ends."""
    return (
        mode == "updates"
        and not namespace
        and any(
            isinstance(item, RecordedMessage)
            and isinstance(item.message, AIMessage)
            and not item.message.tool_calls
            for item in items
        )
    )


def _waits_for_its_step(item: MappedItem) -> bool:
    return isinstance(item, NewEvent) and item.type == events.CONTEXT_PRESSURE


def _announces_interrupt(mode: str, data: Any) -> bool:
    """LangGraph's `updates` stream names a run stopped by `interrupt()` (in any graph) `__interrupt__`."""
    return mode == "updates" and isinstance(data, dict) and INTERRUPT_UPDATE_KEY in data


def _written_by_unsaved_steps(state: StateSnapshot) -> list[BaseMessage]:
    """Messages of finished tasks whose step has no checkpoint yet (only after a crash)."""
    found: list[BaseMessage] = []
    for task in state.tasks:
        result = task.result
        if not isinstance(result, dict):
            continue
        written = result.get("messages", [])
        for item in written if isinstance(written, list) else [written]:
            if isinstance(item, BaseMessage):
                found.append(item)
    return found


def _unanswered_tool_calls(history: list[BaseMessage]) -> list[tuple[str, str]]:
    answered = {message.tool_call_id for message in history if isinstance(message, ToolMessage)}
    unanswered: list[tuple[str, str]] = []
    for message in history:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                call_id = call.get("id")
                if call_id and call_id not in answered:
                    unanswered.append((call_id, call["name"]))
    return unanswered


def _seconds_since(moment: datetime) -> float:
    return _seconds_between(moment, utcnow())


def _seconds_between(start: datetime, end: datetime | None) -> float:
    if end is None:
        return 0.0
    start, end = (m if m.tzinfo else m.replace(tzinfo=UTC) for m in (start, end))
    return max(0.0, (end - start).total_seconds())


def _describe_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"
