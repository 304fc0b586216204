"""Background execution of runs inside the service process, with leases so a crash strands nothing.

- Claiming: intake starts a run directly when its conversation is idle, this process has a free
  slot and no older queued run may be waiting for one (a freed slot goes to the oldest waiting run,
  FIFO across conversations). A run that finishes hands its slot over in its finishing transaction:
  that transaction starts the oldest queue head that may start (`hand_over_slot`), so a queued run
  costs no queue read and claim of its own. Fairness: a user holds at most `max_runs_per_user` of
  this process's slots; a user's further runs wait (`user_run_limit`) while other users' runs take
  the free slots.
  Everything else waits as `queued`; the poll loop (woken on every local change, and every
  `poll_seconds` for other processes' changes) finds conversations whose queue head may start and
  claims it under `try_conversation_lock` — on PostgreSQL `SELECT … FOR UPDATE SKIP LOCKED`, so
  several service processes share one queue without waiting on each other.
- Leases: a claimed run is `running` with `lease_owner` = this worker and `lease_expires_at`. The
  heartbeat renews the leases of the runs executing here every `lease_seconds / 3` and notices
  `cancel_requested` flags set by any process. With Redis, a cancel request reaches the executing
  process at once through the live bus (`request_cancel`); the flag is the fallback.
- Recovery: at start and on every poll, a `running` run whose lease expired (its process died) is
  failed with an `error` event, which frees its conversation's queue.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from types import TracebackType
from typing import Final

from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import RUN_FAILED, Run, utcnow
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.repositories.run_events import NewEvent
from ctxpress.app.server.repositories.runs import RunLease, RunRepository
from ctxpress.app.server.runtime import events
from ctxpress.app.server.runtime.events import EventLog
from ctxpress.app.server.runtime.execution import ActiveRun, ClaimedRun, RunExecutor, run_started_data
from ctxpress.app.server.runtime.locks import (
    LockedConversation,
    try_conversation_lock,
    try_second_conversation_lock,
)
from ctxpress.app.server.runtime.unanswered_calls import LEASE_EXPIRED_ERROR

logger = logging.getLogger(__name__)

RECOVERY_BATCH = 100
SHUTDOWN_GRACE_SECONDS = 10.0
#: Queue heads a finishing run looks at for its slot's next run (one may be locked by another
#: process, or its user at the limit; the poll looks further).
HAND_OVER_CANDIDATES: Final = 3


def new_worker_id() -> str:
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RunWorker:
    def __init__(
        self,
        *,
        database: Database,
        events: EventLog,
        executor: RunExecutor,
        worker_id: str,
        max_concurrent_runs: int,
        max_runs_per_user: int,
        lease_seconds: float,
        poll_seconds: float,
        metrics: ServiceMetrics,
    ) -> None:
        self.database = database
        self.events = events
        self.executor = executor
        self.worker_id = worker_id
        self.max_concurrent_runs = max_concurrent_runs
        self.max_runs_per_user = max_runs_per_user
        self.metrics = metrics
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self._active: dict[str, ActiveRun] = {}
        self._reserved_slots = 0
        self._reserved_by_user: Counter[str] = Counter()
        self._wakeup = asyncio.Event()
        #: Whether a queued run may be waiting: set by local queueing, cleared by a queue read that
        #: found nothing left. A finished run re-reads the queue only while it is set; runs queued by
        #: other processes are found by the timed poll (every `poll_seconds`).
        self._queue_may_hold_runs = True
        #: Whether queued runs may be waiting for a free slot: set when a slot frees or a run is
        #: queued while runs may be queued, and by a queue read that ran out of slots; cleared by a
        #: queue read that started every waiting run it found. While set, intake queues a new message
        #: instead of starting it, so a freed slot goes to the oldest waiting run (FIFO across
        #: conversations), not to the message that happens to arrive before the queue is read.
        self._runs_wait_for_slot = True
        self._last_recovery = float("-inf")
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    # --- slots and launching -------------------------------------------------------------------

    def lease_deadline(self) -> datetime:
        return utcnow() + timedelta(seconds=self.lease_seconds)

    def has_free_slot(self) -> bool:
        return not self._stopping and len(self._active) + self._reserved_slots < self.max_concurrent_runs

    def user_at_limit(self, user_id: str) -> bool:
        """The user already holds `max_runs_per_user` of this process's slots."""
        running = sum(1 for active in self._active.values() if active.user_id == user_id)
        return running + self._reserved_by_user[user_id] >= self.max_runs_per_user

    def users_at_limit(self) -> set[str]:
        users = {active.user_id for active in self._active.values() if active.user_id} | set(
            self._reserved_by_user
        )
        return {user_id for user_id in users if self.user_at_limit(user_id)}

    def reserve_slot_for_new_message(self, user_id: str) -> bool:
        """Book a slot for a message that arrives now, unless older queued runs may be waiting for
        one: they go first (the message queues behind them)."""
        return not self._runs_wait_for_slot and self.reserve_slot(user_id)

    def reserve_slot(self, user_id: str) -> bool:
        """Book capacity before claiming a run (claim and launch are separated by a commit)."""
        if not self.has_free_slot() or self.user_at_limit(user_id):
            return False
        self._reserved_slots += 1
        self._reserved_by_user[user_id] += 1
        return True

    def release_slot(self, user_id: str) -> None:
        self._reserved_slots -= 1
        self._unreserve_user(user_id)

    def _unreserve_user(self, user_id: str) -> None:
        self._reserved_by_user[user_id] -= 1
        if self._reserved_by_user[user_id] <= 0:
            del self._reserved_by_user[user_id]

    def new_lease(self) -> RunLease:
        """A lease for a run this worker starts now."""
        return RunLease(self.worker_id, self.lease_deadline())

    async def mark_started(self, session: AsyncSession, run: Run) -> int:
        """Make a run `running` here, with its `run_started` event in the same transaction: the event
        is there (and on every stream) the moment the run is, before the executor does anything.
        Returns the event's id."""
        RunRepository.start(run, self.new_lease())
        return await self.announce_started(session, run)

    async def announce_started(self, session: AsyncSession, run: Run) -> int:
        """The `run_started` event of a run started here (already `running` in the session), in the
        same transaction; returns its id."""
        event = self.started_event(run)
        return await self.events.append(session, run.id, event.type, event.data)

    def started_event(self, run: Run) -> NewEvent:
        """The `run_started` event of a run started here."""
        return NewEvent(events.RUN_STARTED, run_started_data(run, self.executor.agents.get(run.agent_name)))

    def launch(
        self, run_id: str, conversation_id: str, user_id: str, *, claimed: ClaimedRun | None = None
    ) -> None:
        """Execute a run this worker has claimed (consumes a reserved slot); `claimed`: the run as
        its claim left it, committed."""
        self._reserved_slots -= 1
        self._unreserve_user(user_id)
        active = ActiveRun(run_id, conversation_id, user_id=user_id, claimed=claimed)
        self._active[run_id] = active
        self.metrics.runs_active.set(len(self._active))
        active.task = asyncio.create_task(self._execute(active), name=f"ctxpress-run-{run_id}")

    async def _execute(self, active: ActiveRun) -> None:
        try:
            await self.executor.execute(active, hand_over=functools.partial(self.hand_over_slot, active))
        except asyncio.CancelledError:
            pass  # the executor already recorded what it could; the task ends here
        except Exception:
            logger.exception("run %s: executor crashed", active.run_id)
        finally:
            self._active.pop(active.run_id, None)
            self.metrics.runs_active.set(len(self._active))
            self.nudge()

    def nudge(self, *, queued: bool = False) -> None:
        """Look at the queue now: a run finished (a slot is free), or -- `queued` -- a run was queued,
        resumed or cancelled here, or a conversation freed (its queue head may start)."""
        if queued:
            self._queue_may_hold_runs = True
        if self._queue_may_hold_runs:
            self._runs_wait_for_slot = True  # until the queue read below says otherwise
        self._wakeup.set()

    def cancel_local(self, run_id: str) -> bool:
        active = self._active.get(run_id)
        if active is None or active.task is None:
            return False
        if active.stop_reason is None:  # once: a second cancel would interrupt the bookkeeping
            active.stop_reason = "cancelled"
            active.task.cancel()
        return True

    @property
    def active_run_ids(self) -> list[str]:
        return list(self._active)

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.recover_expired_leases()
        self._loops = [
            asyncio.create_task(self._poll_loop(), name="ctxpress-worker-poll"),
            asyncio.create_task(self._heartbeat_loop(), name="ctxpress-worker-heartbeat"),
        ]
        self.nudge()

    async def stop(self) -> None:
        """Stop claiming; runs still executing are failed ("the service stopped") and awaited."""
        self._stopping = True
        for loop in self._loops:
            loop.cancel()
        for active in list(self._active.values()):
            active.stop_reason = active.stop_reason or "shutdown"
            if active.task is not None:
                active.task.cancel()
        pending = [
            task for task in (*self._loops, *(a.task for a in self._active.values())) if task is not None
        ]
        if pending:
            await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_SECONDS)

    async def _poll_loop(self) -> None:
        while True:
            timed_out = False
            try:
                # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` drops a cancellation
                # that arrives as the wait ends, and a stopped service would keep this loop.
                async with asyncio.timeout(self.poll_seconds):
                    await self._wakeup.wait()
            except TimeoutError:
                timed_out = True
            self._wakeup.clear()
            try:
                # Expired leases at most once per poll period, however often local changes wake us.
                if time.monotonic() - self._last_recovery >= self.poll_seconds:
                    self._last_recovery = time.monotonic()
                    await self.recover_expired_leases()
                if timed_out or self._queue_may_hold_runs:
                    await self.claim_ready_runs()
            except Exception:
                logger.exception("worker poll failed; retrying in %.1f s", self.poll_seconds)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.heartbeat()
            except Exception:
                logger.exception("lease heartbeat failed")

    # --- queue, leases, recovery ------------------------------------------------------------------

    async def claim_ready_runs(self) -> int:
        """Start queue heads of idle conversations while this process has free slots."""
        free = self.max_concurrent_runs - len(self._active) - self._reserved_slots
        if free <= 0 or self._stopping:
            return 0
        async with self.database.session() as session:
            # Oldest first, without the users who hold their share already (however long their queue).
            runs = RunRepository(session)
            candidates = await runs.ready_queue_heads(limit=free * 2, excluding_owners=self.users_at_limit())
            # Queued runs that cannot start yet (behind a running one, or their user at the limit)
            # may start when a run ends: keep looking on every finish while any are queued.
            self._queue_may_hold_runs = bool(candidates) or await runs.count_queued() > 0
        started = 0
        out_of_slots = False
        for conversation_id, user_id in candidates:
            if not self.has_free_slot():
                out_of_slots = True
                break
            # None also when this user holds enough slots: another user's run may start.
            claimed = await self._with_a_slot(
                user_id, functools.partial(self._claim_queue_head, conversation_id)
            )
            if claimed is None:
                continue
            self.launch(claimed.run.id, conversation_id, user_id, claimed=claimed)
            started += 1
        # Heads left for lack of a slot (or more than this read looked at) still wait.
        self._runs_wait_for_slot = out_of_slots or len(candidates) >= free * 2
        return started

    async def _claim_queue_head(self, conversation_id: str) -> ClaimedRun | None:
        async with (
            self.database.session() as session,
            try_conversation_lock(session, conversation_id) as locked,
        ):
            if locked is None:
                return None  # another worker holds it right now; it will be looked at again
            return await self._start_queue_head(locked)

    async def _start_queue_head(self, locked: LockedConversation) -> ClaimedRun | None:
        """Make the conversation's queue head running here, if nothing runs or waits before it."""
        busy = await locked.busy_state()
        if busy is None or busy.reason != "queued":
            return None
        head = await RunRepository(locked.session).head_of_queue(locked.conversation.id)
        if head is None:
            return None
        return ClaimedRun(head, await self.mark_started(locked.session, head))

    async def hand_over_slot(
        self, finished: ActiveRun, session: AsyncSession, until_committed: AsyncExitStack
    ) -> Callable[[], None] | None:
        """In the transaction that finishes `finished` (under its conversation's lock): start the run
        its slot goes to -- the oldest queue head that may start, as the poll would pick it -- with
        that commit. Returns what launches it once the transaction has committed (None: no run was
        claimed). `until_committed` is left after the commit or rollback: it lets go of the claimed
        conversation's lock, and on a rollback gives both slots back as they were."""
        if self._stopping or not self._queue_may_hold_runs:
            return None
        # The finished run's slot is the one handed over (the run's task ends right after).
        if self._active.pop(finished.run_id, None) is None:
            return None
        until_committed.push(_on_rollback(functools.partial(self._still_active, finished)))
        runs = RunRepository(session)
        candidates = await runs.ready_queue_heads(
            limit=HAND_OVER_CANDIDATES, excluding_owners=self.users_at_limit()
        )
        if not candidates:
            # Nothing waits for a slot (as after the poll's read that finds no head): a new message
            # may take one; a finish reads the queue again only while runs are queued.
            self._runs_wait_for_slot = False
            self._queue_may_hold_runs = await runs.count_queued() > 0
            return None
        for conversation_id, user_id in candidates:
            claim = functools.partial(
                self._claim_in, session, until_committed, conversation_id, holding=finished.conversation_id
            )
            claimed = await self._with_a_slot(user_id, claim)
            if claimed is None:
                continue
            until_committed.push(_on_rollback(functools.partial(self.release_slot, user_id)))
            return functools.partial(self.launch, claimed.run.id, conversation_id, user_id, claimed=claimed)
        return None

    async def _claim_in(
        self, session: AsyncSession, until_committed: AsyncExitStack, conversation_id: str, *, holding: str
    ) -> ClaimedRun | None:
        """Start the conversation's queue head in a transaction that holds `holding`'s lock."""
        locked = await until_committed.enter_async_context(
            try_second_conversation_lock(session, conversation_id, holding=holding)
        )
        return None if locked is None else await self._start_queue_head(locked)

    async def _with_a_slot(
        self, user_id: str, claim: Callable[[], Awaitable[ClaimedRun | None]]
    ) -> ClaimedRun | None:
        """`claim` a run of `user_id` with a slot reserved for it; None, and the slot given back, when
        none is free for the user or nothing was claimed."""
        if not self.reserve_slot(user_id):
            return None
        try:
            claimed = await claim()
        except BaseException:
            self.release_slot(user_id)
            raise
        if claimed is None:
            self.release_slot(user_id)
        return claimed

    def _still_active(self, run: ActiveRun) -> None:
        if run.task is not None and not run.task.done():
            self._active[run.run_id] = run

    async def heartbeat(self) -> None:
        run_ids = list(self._active)
        if not run_ids:
            return
        async with self.database.session() as session:
            runs = RunRepository(session)
            held = await runs.renew_leases(run_ids, self.worker_id, self.lease_deadline())
            cancel_requested = await runs.cancel_requested_ids(run_ids)
            await session.commit()
        for run_id in run_ids:
            active = self._active.get(run_id)
            if active is None or active.task is None or active.stop_reason is not None:
                continue
            if run_id not in held:
                # Someone else changed the run (the recovery sweep of another process after a stall).
                active.stop_reason = "lease_lost"
                active.task.cancel()
            elif run_id in cancel_requested:
                active.stop_reason = "cancelled"
                active.task.cancel()

    async def recover_expired_leases(self) -> int:
        async with self.database.session() as session:
            conversation_ids = await RunRepository(session).expired_lease_conversation_ids(
                utcnow(), limit=RECOVERY_BATCH
            )
        recovered = 0
        for conversation_id in conversation_ids:
            async with (
                self.database.session() as session,
                try_conversation_lock(session, conversation_id) as locked,
            ):
                if locked is None:
                    continue
                runs = RunRepository(session)
                for run in await runs.expired_leases(conversation_id, utcnow()):
                    if run.id in self._active:
                        continue  # executing here; the heartbeat was late, not the worker dead
                    logger.warning("run %s: lease of %s expired; marking it failed", run.id, run.lease_owner)
                    await self.events.append(session, run.id, events.ERROR, {"message": LEASE_EXPIRED_ERROR})
                    runs.finish(run, RUN_FAILED, LEASE_EXPIRED_ERROR)
                    await self.events.append(
                        session,
                        run.id,
                        events.RUN_FINISHED,
                        {"status": RUN_FAILED, "error": LEASE_EXPIRED_ERROR},
                    )
                    recovered += 1
        if recovered:
            self.nudge(queued=True)
        return recovered


def _on_rollback(
    undo: Callable[[], None],
) -> Callable[[type[BaseException] | None, BaseException | None, TracebackType | None], None]:
    """An exit callback for an `AsyncExitStack` around a transaction: `undo` when it did not commit."""

    def exit_callback(
        exc_type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            undo()

    return exit_callback
