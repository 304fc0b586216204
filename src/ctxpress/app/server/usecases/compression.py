"""Manual ("active") compression (S17–S19, S28) and the context status panel's figures (S22).

Manual compression is one synchronous maintenance request: no run, no queued request, no run type.

    mark the conversation `compressing` (committed; intake answers 409 `compressing` from now on)
    conversation lock (the one run intake takes, S18)
      └ busy? → 409 thread_busy (running | waiting_input | queued)
      └ state ← agent.graph.aget_state                        (the canonical compiled graph, S19;
                                                              its checkpoint read once, see below)
      └ workdir handle acquired
          └ compress_now: L1 view, cutoff, history file + summary (both must succeed, S28)
        workdir handle released (success or failure)
      └ agent.graph.aupdate_state({"_summarization_event": …})
      └ pressure record marked stale (S19)
    commit; the lock is released, then the mark -- a message sent meanwhile was refused with
    `Retry-After`, and the next one starts at once on the new state
    the answer; the thread's older checkpoints pruned in the background, under the lock if it is
    free (`runtime/checkpoint_pruning.BackgroundPruner`)

Nothing is written when any step before `aupdate_state` fails, so a failure leaves the state and
the `_summarization_event` exactly as they were.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.agents_file import CONTEXT_COMPRESSION
from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation, ManualCompression, utcnow
from ctxpress.app.server.errors import (
    AgentNotConfiguredError,
    CompressionFailedError,
    CompressionNotSupportedError,
    ServiceError,
    ThreadBusyError,
)
from ctxpress.app.server.repositories.compressions import CompressionRepository
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.pressure import PressureRepository
from ctxpress.app.server.repositories.runs import BusyState
from ctxpress.app.server.repositories.usage import UsageRepository
from ctxpress.app.server.runtime.agents import AgentRegistry, AgentRuntime, thread_config
from ctxpress.app.server.runtime.checkpoint_pruning import BackgroundPruner
from ctxpress.app.server.runtime.checkpoints import one_checkpoint_read
from ctxpress.app.server.runtime.locks import (
    COMPRESSING_RETRY_AFTER_SECONDS,
    LockedConversation,
    compression_holds,
    conversation_lock,
)
from ctxpress.app.server.runtime.usage_recording import UsageCollector
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.app.server.usecases.pressure import (
    PressureService,
    RecordedPressure,
    estimate_next_input,
    suggests_compression,
    system_message_of,
)
from ctxpress.manual import FailedPart, ManualCompressionError, ManualCompressionResult, compress_now
from ctxpress.middleware import EVENT_KEY
from ctxpress.pressure import SUGGEST_COMPRESS_RATIO, RequestPressure
from ctxpress.summary.event import SummarizationEvent

logger = logging.getLogger(__name__)

#: How long a compression's mark (`conversations.compressing_until`) outlives the summary timeout,
#: and how long it lasts when the agent sets none (seconds); a crashed process's mark expires then.
CLAIM_MARGIN_S: Final = 60.0
NO_TIMEOUT_CLAIM_S: Final = 600.0

#: The summary model is an upstream service (502); the others are this service's storage (500).
FAILURE_STATUS: Final[dict[FailedPart, int]] = {
    FailedPart.SUMMARY: 502,
    FailedPart.HISTORY: 500,
    FailedPart.COMPACTION: 500,
    FailedPart.CHECKPOINT: 500,
}


@dataclass(frozen=True)
class CompressionOutcome:
    conversation_id: str
    compressed: bool
    reason: str | None
    tokens_before: int
    tokens_after: int
    event: SummarizationEvent | None
    #: The checkpoint written by the update (None when nothing was compressed).
    checkpoint_id: str | None
    reason_code: str | None = None
    messages_since_summary: int | None = None
    messages_needed: int | None = None

    @classmethod
    def of(
        cls, conversation_id: str, result: ManualCompressionResult, checkpoint_id: str | None = None
    ) -> CompressionOutcome:
        return cls(
            conversation_id=conversation_id,
            compressed=result.compressed,
            reason=result.reason,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            event=result.event,
            checkpoint_id=checkpoint_id,
            reason_code=result.reason_code,
            messages_since_summary=result.messages_since_summary,
            messages_needed=result.messages_needed,
        )


@dataclass(frozen=True)
class ContextStatus:
    """What the status panel shows (S22): the next input's estimate, the last record, the summary."""

    conversation_id: str
    agent: str
    capability: bool
    #: The next request as the model will receive it (after L1 when L1 would run, S5).
    estimate: RequestPressure
    #: The same request before L1.
    raw: RequestPressure
    suggest_compress: bool
    suggest_ratio: float
    message_count: int
    effective_message_count: int
    recorded: RecordedPressure
    summary: SummarizationEvent | None


class CompressionService:
    def __init__(
        self,
        *,
        database: Database,
        agents: AgentRegistry,
        workdirs: ConversationWorkdirs,
        pressure: PressureService,
        pruner: BackgroundPruner,
    ) -> None:
        self.database = database
        self.agents = agents
        self.workdirs = workdirs
        self.pressure = pressure
        self.pruner = pruner

    async def compress(self, conversation: Conversation) -> CompressionOutcome:
        """Compress `conversation` now (the caller checked the user owns it)."""
        runtime = self._runtime(conversation.agent_name)
        if not runtime.definition.has_capability(CONTEXT_COMPRESSION):
            raise CompressionNotSupportedError(
                f"agent {runtime.name!r} does not support context compression",
                details={"agent": runtime.name, "capability": CONTEXT_COMPRESSION},
            )
        conversation_id = conversation.id
        # The summary call is a real bill: recorded under "summary" even when compression fails,
        # in the locked session itself (another connection's insert would wait on the locked row).
        collector = UsageCollector(
            main_provider=runtime.main_usage_provider, summary_provider=runtime.summary_usage_provider
        )
        until = await self._claim(conversation_id, runtime)
        try:
            outcome = await self._compress_claimed(runtime, conversation_id, collector)
        finally:
            async with self.database.session() as session:
                await ConversationRepository(session).release_compression(conversation_id, until=until)
                await session.commit()
        if outcome.compressed:
            # Off the answer's path: the thread keeps the checkpoint just written, nothing older.
            self.pruner.schedule(conversation_id)
        return outcome

    async def _claim(self, conversation_id: str, runtime: AgentRuntime) -> datetime:
        """Mark the conversation as being compressed (committed: every process sees it) before
        waiting for its lock, so intake refuses new messages at once instead of queueing behind
        the summary call (`locks.py`); a second compression is refused the same way."""
        now = utcnow()
        until = now + timedelta(
            seconds=(runtime.definition.summary_timeout or NO_TIMEOUT_CLAIM_S) + CLAIM_MARGIN_S
        )
        async with self.database.session() as session:
            conversations = ConversationRepository(session)
            claimed = await conversations.claim_compression(conversation_id, now=now, until=until)
            if not claimed and not await compression_holds(session, conversation_id):
                # The mark of a process that died mid-compression: nobody holds the lock.
                claimed = await conversations.claim_compression(
                    conversation_id, now=now, until=until, force=True
                )
            await session.commit()
        if not claimed:
            raise ThreadBusyError(
                BusyState.compressing(),
                "the conversation is already being compressed",
                retry_after=COMPRESSING_RETRY_AFTER_SECONDS,
            )
        return until

    async def _compress_claimed(
        self, runtime: AgentRuntime, conversation_id: str, collector: UsageCollector
    ) -> CompressionOutcome:
        refused: ServiceError | None = None
        async with (
            self.database.session() as session,
            conversation_lock(session, conversation_id) as locked,
        ):
            try:
                outcome = await self._compress_locked(runtime, conversation_id, collector, session, locked)
            except ServiceError as exc:
                # Busy, or a part failed before anything was written in this session: record the
                # bill and let the hold end normally, so the lock is released by the one commit
                # below, never earlier (a rollback here would release the row lock mid-hold).
                refused = exc
            except BaseException:
                await session.rollback()
                await _record_usage(session, conversation_id, collector)
                await session.commit()
                raise
            await _record_usage(session, conversation_id, collector)
        if refused is not None:
            raise refused
        return outcome

    async def _compress_locked(
        self,
        runtime: AgentRuntime,
        conversation_id: str,
        collector: UsageCollector,
        session: AsyncSession,
        locked: LockedConversation,
    ) -> CompressionOutcome:
        # Held from this check until the checkpoint update below (S18).
        if (busy := await locked.busy_state()) is not None:
            raise ThreadBusyError(busy)
        # The thread is idle and locked: nothing else writes its checkpoint until the update, so the
        # update's own read of the checkpoint reuses the one `aget_state` decoded.
        with one_checkpoint_read():
            return await self._compress_idle(runtime, conversation_id, collector, session)

    async def _compress_idle(
        self, runtime: AgentRuntime, conversation_id: str, collector: UsageCollector, session: AsyncSession
    ) -> CompressionOutcome:
        config = thread_config(conversation_id)
        snapshot = await runtime.graph.aget_state(config)
        values: dict[str, Any] = dict(snapshot.values or {})
        with self.workdirs.acquire(conversation_id) as workdir:
            try:
                result = await compress_now(
                    values.get("messages") or [],
                    values.get(EVENT_KEY),
                    config=runtime.compression,
                    workdir=workdir,
                    summary_model=runtime.summary_model,
                    system_message=system_message_of(runtime.definition.system_prompt),
                    tools=runtime.tools,
                    thread_id=conversation_id,
                    cache=runtime.compaction_cache,
                    counter=runtime.token_counter,
                    callbacks=[collector],
                )
            except ManualCompressionError as exc:
                logger.warning("manual compression of %s failed (%s): %s", conversation_id, exc.part, exc)
                raise CompressionFailedError(
                    exc.part, str(exc), status_code=FAILURE_STATUS[exc.part]
                ) from exc
        if not result.compressed or result.event is None:
            return CompressionOutcome.of(conversation_id, result)
        # The figures of the status panel, before and after: one definition of "the next request".
        result = replace(
            result,
            tokens_before=self._next_request(runtime, values).total,
            tokens_after=self._next_request(runtime, {**values, EVENT_KEY: result.event}).total,
        )
        try:
            updated = await runtime.graph.aupdate_state(config, {EVENT_KEY: result.event})
        except Exception as exc:
            logger.exception("manual compression of %s: the checkpoint update failed", conversation_id)
            raise CompressionFailedError(
                FailedPart.CHECKPOINT,
                f"the summary could not be stored in the agent state: {type(exc).__name__}",
                status_code=FAILURE_STATUS[FailedPart.CHECKPOINT],
            ) from exc
        # The recorded figure described a request the state no longer implies (S19).
        await PressureRepository(session).invalidate(conversation_id)
        await CompressionRepository(session).add_manual(_manual_record(conversation_id, result))
        checkpoint_id = (updated or {}).get("configurable", {}).get("checkpoint_id")
        return CompressionOutcome.of(conversation_id, result, checkpoint_id)

    async def context_status(self, conversation: Conversation) -> ContextStatus:
        """The panel's figures, from the current state read through the agent's graph (no lock: a snapshot)."""
        runtime = self._runtime(conversation.agent_name)
        snapshot = await runtime.graph.aget_state(thread_config(conversation.id))
        estimate = estimate_next_input(
            snapshot.values or {},
            system_prompt=runtime.definition.system_prompt,
            tools=runtime.tools,
            config=runtime.compression,
            counter=runtime.token_counter,
        )
        capability = runtime.definition.has_capability(CONTEXT_COMPRESSION)
        return ContextStatus(
            conversation_id=conversation.id,
            agent=runtime.name,
            capability=capability,
            estimate=estimate.pressure,
            raw=estimate.raw,
            suggest_compress=suggests_compression(estimate.pressure, capability=capability),
            suggest_ratio=SUGGEST_COMPRESS_RATIO,
            message_count=estimate.message_count,
            effective_message_count=len(estimate.effective.messages),
            recorded=await self.pressure.recorded(conversation.id),
            summary=estimate.effective.event,
        )

    def _next_request(self, runtime: AgentRuntime, values: dict[str, Any]) -> RequestPressure:
        return estimate_next_input(
            values,
            system_prompt=runtime.definition.system_prompt,
            tools=runtime.tools,
            config=runtime.compression,
            counter=runtime.token_counter,
        ).pressure

    def _runtime(self, agent_name: str) -> AgentRuntime:
        runtime = self.agents.get(agent_name)
        if runtime is None:
            raise AgentNotConfiguredError(f"agent {agent_name!r} is not configured any more")
        return runtime


def _manual_record(conversation_id: str, result: ManualCompressionResult) -> ManualCompression:
    assert result.event is not None
    return ManualCompression(
        conversation_id=conversation_id,
        tokens_before=result.tokens_before,
        tokens_after=result.tokens_after,
        cutoff_index=result.event["cutoff_index"],
        summary_count=result.event.get("summary_count"),
        file_path=result.event["file_path"],
    )


async def _record_usage(session: AsyncSession, conversation_id: str, collector: UsageCollector) -> None:
    await UsageRepository(session).add([draft.to_row(conversation_id, None) for draft in collector.drain()])
