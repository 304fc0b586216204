"""Run events: stored in SQL (the source of truth, replayable with `Last-Event-ID`), announced in-process.

A writer appends events inside its transaction; listeners are woken when that transaction commits
(`call_after_commit`), then read the rows. Listeners in another process (PostgreSQL deployments
with several service processes) see them on their next poll, at most `poll_seconds` later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database, call_after_commit
from ctxpress.app.server.db.models import RUN_WAITING_INPUT, TERMINAL_RUN_STATUSES
from ctxpress.app.server.repositories.run_events import RunEventRepository
from ctxpress.app.server.repositories.runs import RunRepository

# The library's stream events are SSE events of the same name: their names are the library's.
from ctxpress.events import CONTEXT_COMPRESSION as CONTEXT_COMPRESSION
from ctxpress.events import CONTEXT_PRESSURE as CONTEXT_PRESSURE

# Event types (the SSE `event:` field).
RUN_QUEUED_EVENT: Final = "run_queued"
RUN_STARTED: Final = "run_started"
MESSAGE_DELTA: Final = "message_delta"
MESSAGE: Final = "message"
TOOL_CALL: Final = "tool_call"
TOOL_RESULT: Final = "tool_result"
# context_compression, context_pressure: the library's stream events, under their own names (imported above).
USAGE: Final = "usage"
INTERRUPT: Final = "interrupt"
RUN_FINISHED: Final = "run_finished"
ERROR: Final = "error"
CUSTOM: Final = "custom"

REPLAY_BATCH = 500


@dataclass(frozen=True)
class StoredEvent:
    id: int
    type: str
    data: dict[str, Any]


class RunEventNotifier:
    """Wakes the SSE streams of one run when new events of that run are committed (this process only)."""

    def __init__(self) -> None:
        self._listeners: defaultdict[str, set[asyncio.Event]] = defaultdict(set)

    @contextlib.contextmanager
    def listen(self, run_id: str) -> Iterator[asyncio.Event]:
        wakeup = asyncio.Event()
        self._listeners[run_id].add(wakeup)
        try:
            yield wakeup
        finally:
            listeners = self._listeners.get(run_id)
            if listeners is not None:
                listeners.discard(wakeup)
                if not listeners:
                    del self._listeners[run_id]

    def publish(self, run_id: str) -> None:
        for wakeup in self._listeners.get(run_id, ()):
            wakeup.set()


class EventLog:
    def __init__(self, database: Database, *, poll_seconds: float) -> None:
        self.database = database
        self.notifier = RunEventNotifier()
        self.poll_seconds = poll_seconds

    async def append(self, session: AsyncSession, run_id: str, event_type: str, data: dict[str, Any]) -> int:
        """Add an event to the session's transaction; listeners wake when it commits."""
        event = await RunEventRepository(session).append(run_id, event_type, data)
        call_after_commit(session, lambda: self.notifier.publish(run_id))
        return event.id

    async def emit(self, run_id: str, event_type: str, data: dict[str, Any]) -> int:
        """Store one event in its own transaction."""
        async with self.database.session() as session:
            event_id = await self.append(session, run_id, event_type, data)
            await session.commit()
        return event_id

    async def follow(self, run_id: str, *, after_id: int) -> AsyncIterator[StoredEvent]:
        """Stored events after `after_id`, then live ones, until the run finishes or waits for input.

        A stream for a run in `waiting_input` ends after its `interrupt` event; after `resume`, the
        client reconnects with `Last-Event-ID` and continues from there.
        """
        cursor = after_id
        with self.notifier.listen(run_id) as wakeup:
            while True:
                wakeup.clear()
                async with self.database.session() as session:
                    # Status first: final events commit together with the status, so when this read
                    # sees the run finished, the event read below sees every event it will ever have.
                    run = await RunRepository(session).get(run_id)
                    events = await RunEventRepository(session).after(run_id, cursor, limit=REPLAY_BATCH)
                for event in events:
                    cursor = event.id
                    yield StoredEvent(event.id, event.type, event.data)
                if events:
                    continue
                if run is None or run.status in TERMINAL_RUN_STATUSES or run.status == RUN_WAITING_INPUT:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), timeout=self.poll_seconds)
