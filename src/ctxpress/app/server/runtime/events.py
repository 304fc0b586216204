"""Run events: durable ones stored in SQL, all of them carried live by the bus while the run executes.

- Durable (SQL, replayable with `Last-Event-ID` at any time): run lifecycle, tool calls and results,
  compression and pressure events, usage, interrupts, and each complete message (once). A writer
  appends them inside its transaction; when it commits they are published on the live bus.
- Live only: the coalesced `message_delta`s (`delta_stream.py`), published on the bus, never stored.
  After the run, the complete `message` replaces them: a replay of a finished run has no deltas.

`follow` serves one SSE stream: the durable events after the client's position from SQL plus, while
the run executes, the deltas the bus still holds (its backlog); then what the bus delivers. It reads
SQL again when the bus is silent for `BUS_RECHECK_SECONDS`, reports a gap (a lost Redis connection, a
full queue, or -- without a bus that every writer publishes on, i.e. PostgreSQL without Redis -- the
process's silent-stream watch finding a stored event the stream was not given: `silent_streams.py`),
or delivers an `interrupt` — so a stream never ends before the run's final events, and without a
shared bus (another process's run) it still gets every durable event, about `poll_seconds` late. A
`run_finished` the bus delivers without a gap ends the stream at once: it is the run's last event,
committed together with the final status.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database, call_after_commit
from ctxpress.app.server.db.models import STREAM_ENDING_STATUSES, Run, User
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.repositories.run_events import NewEvent, RunEventRepository, StoredEvent
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.runtime.live_events import EventPosition, LiveBus, LiveEvent, LiveSubscriber
from ctxpress.app.server.runtime.silent_streams import SilentStreamWatch

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

#: A run's first event (stored by the intake that accepted it).
FIRST_EVENT_TYPES: Final = frozenset({RUN_QUEUED_EVENT, RUN_STARTED})
#: After these the follower checks the run's status in SQL (after `run_finished` only when the bus
#: reported a gap): its stream may end.
ENDING_EVENT_TYPES: Final = frozenset({RUN_FINISHED, INTERRUPT})
REPLAY_BATCH = 500
#: With a bus that carries every event, how long a stream waits in silence before re-reading SQL.
BUS_RECHECK_SECONDS = 5.0

DurableListener = Callable[[int], None]


@dataclass(frozen=True)
class FirstRead:
    """A stream's first read: its run (status first, as `_durable_after` reads it) and the stored
    events after the client's position."""

    run: Run
    events: list[LiveEvent]


class EventLog:
    def __init__(
        self,
        database: Database,
        *,
        bus: LiveBus,
        metrics: ServiceMetrics,
        poll_seconds: float,
        bus_sees_everything: bool,
    ) -> None:
        """`bus_sees_everything`: every process writing events publishes on this bus (Redis, or
        SQLite's single process). Otherwise one read per process every `poll_seconds` looks for
        what other processes stored for its streams (`SilentStreamWatch`); either way a stream
        re-reads SQL itself after `BUS_RECHECK_SECONDS` of silence, as a safety net."""
        self.database = database
        self.bus = bus
        self.metrics = metrics
        self.poll_seconds = poll_seconds
        self.bus_sees_everything = bus_sees_everything
        #: Without such a bus, one read per process each `poll_seconds` finds what other processes
        #: stored for any of its streams, and wakes those streams.
        self.silent_streams = (
            None
            if bus_sees_everything
            else SilentStreamWatch(database, interval=poll_seconds, metrics=metrics)
        )
        # A stream's own re-read after silence is then a safety net, as with a bus that sees everything.
        self.silence_seconds = max(poll_seconds, BUS_RECHECK_SECONDS)
        self._durable_listeners: dict[str, DurableListener] = {}

    async def append(self, session: AsyncSession, run_id: str, event_type: str, data: dict[str, Any]) -> int:
        """Add a durable event to the session's transaction; it goes live when the transaction commits."""
        (event_id,) = await self.append_all(session, run_id, [NewEvent(event_type, data)])
        return event_id

    async def append_all(self, session: AsyncSession, run_id: str, new: Sequence[NewEvent]) -> list[int]:
        """Add durable events, in this order, to the session's transaction; they go live, in the same
        order, when the transaction commits."""
        stored = await RunEventRepository(session).append(run_id, new)
        self.stored(session, run_id, stored)
        return [event.id for event in stored]

    def stored(self, session: AsyncSession, run_id: str, events: Sequence[StoredEvent]) -> None:
        """Durable events the caller has just stored in the session's transaction (in this order):
        they go live, in the same order, when the transaction commits."""
        for event in events:
            live = LiveEvent(run_id, EventPosition(event.id), event.type, event.data)
            call_after_commit(session, functools.partial(self._went_durable, live))

    def _went_durable(self, event: LiveEvent) -> None:
        listener = self._durable_listeners.get(event.run_id)
        if listener is not None:
            listener(event.position.durable_id)
        self.bus.publish(event)
        if event.type in ENDING_EVENT_TYPES:
            self.bus.run_ended(event.run_id)

    async def emit(self, run_id: str, event_type: str, data: dict[str, Any]) -> int:
        """Store one durable event in its own transaction."""
        async with self.database.session() as session:
            event_id = await self.append(session, run_id, event_type, data)
            await session.commit()
        return event_id

    @contextlib.contextmanager
    def durable_ids_of(self, run_id: str, listener: DurableListener) -> Iterator[None]:
        """Tell `listener` the id of each durable event of the run committed by this process."""
        self._durable_listeners[run_id] = listener
        try:
            yield
        finally:
            if self._durable_listeners.get(run_id) is listener:
                del self._durable_listeners[run_id]

    async def first_read(
        self,
        run_id: str,
        after: EventPosition,
        *,
        caller: Callable[[AsyncSession], Awaitable[User]],
        token_sha256: str | None = None,
    ) -> FirstRead | None:
        """The run, if the user `caller` authenticates in the read's session owns it, with its stored
        events after `after`: a stream's authentication, ownership check and first read in one
        transaction (None: no such run of this user). Hand it to `follow` as `first`.

        `token_sha256` (the digest of the caller's token): usually the token is valid and the run
        its user's, and one statement reads the run for it; otherwise `caller` answers (its 401)."""
        async with self.database.session() as session:
            runs = RunRepository(session)
            run = None if token_sha256 is None else await runs.get_owned_by_token(run_id, token_sha256)
            if run is None:
                user = await caller(session)
                run = await runs.get_owned(run_id, user.id)
                if run is None:
                    return None
            return FirstRead(run, await self._events_after(session, run_id, after))

    async def follow(
        self,
        run_id: str,
        *,
        after: EventPosition,
        accepted_here: bool = False,
        first: FirstRead | None = None,
    ) -> AsyncIterator[LiveEvent]:
        """Events after `after`, until the run finishes or waits for input.

        A stream for a run in `waiting_input` ends after its `interrupt` event; after `resume`, the
        client reconnects with `Last-Event-ID` and continues from there.

        `accepted_here`: the run was created by this process's intake just now (`POST …/runs/stream`)
        and is followed from its start; when the bus's backlog still begins with the run's first
        event (the in-process bus publishes at commit; Redis may not have it yet), each event of the
        run is in the backlog, still to come on the bus, or -- written by another process that this
        bus does not hear (PostgreSQL without Redis) -- found by the silent-stream watch: the stream
        starts without reading SQL.

        `first`: the read the caller made before subscribing (`first_read`). What was committed
        between that read and the subscription is in the bus's backlog when the bus sees every
        writer; otherwise the silent-stream watch finds it.
        """
        cursor = after
        async with self.bus.subscribe(run_id) as subscriber:
            subscriber.saw(cursor)  # what the client has: nothing at or before it is missing
            executing, catch_up = await self._catch_up(run_id, cursor, subscriber, accepted_here, first)
            caught_up = _in_order_after(catch_up, cursor)
            if caught_up:
                subscriber.saw(caught_up[-1].position)  # in hand: sent next
            # Watched from here on (without a bus that sees every writer), knowing what it has.
            async with self._watched(subscriber, executing):
                check_sql = False
                for event in caught_up:
                    cursor = event.position
                    self.metrics.live_delivered.labels(source=_source(event)).inc()
                    yield event
                    # (Only when the catch-up holds events newer than a read: a run that ended after it.)
                    check_sql = check_sql or event.type in ENDING_EVENT_TYPES
                while executing:
                    if not check_sql:
                        batch = await subscriber.next_batch(self.silence_seconds)
                        # The gap is taken whatever the batch: a wake without events must not leave
                        # it marked (every later wait would return at once: a read loop).
                        check_sql = subscriber.take_gap() or not batch
                        for event in batch:
                            if event.position <= cursor:
                                continue  # already sent (from the backlog or SQL)
                            cursor = event.position
                            self.metrics.live_delivered.labels(source="bus").inc()
                            yield event
                            if event.type == RUN_FINISHED and not check_sql:
                                # The run's last event, committed with its final status and delivered
                                # without a gap: SQL holds nothing newer, no read needed to end.
                                return
                            check_sql = check_sql or event.type in ENDING_EVENT_TYPES
                    if check_sql:
                        check_sql = False
                        run, durable = await self._durable_after(run_id, cursor)
                        executing = _executing(run)
                        for event in _in_order_after([*durable, *subscriber.drain()], cursor):
                            cursor = event.position
                            subscriber.saw(cursor)
                            self.metrics.live_delivered.labels(source=_source(event)).inc()
                            yield event

    async def _catch_up(
        self,
        run_id: str,
        cursor: EventPosition,
        subscriber: LiveSubscriber,
        accepted_here: bool,
        first: FirstRead | None,
    ) -> tuple[bool, list[LiveEvent]]:
        """Whether the run still executes, and what a new stream sends first (unordered, may repeat)."""
        if accepted_here and cursor == EventPosition(0) and self._backlog_from_the_start(subscriber):
            return True, [*subscriber.backlog, *subscriber.drain()]
        if first is not None:
            executing = _executing(first.run)
            catch_up = [*first.events, *subscriber.drain()]
            # Deltas, and what was stored between the read and the subscription.
            return executing, catch_up + subscriber.backlog if executing else catch_up
        # Subscribed before the one read: what is published after the read is on the bus, and the
        # read (status first) holds everything a finished run will ever have -- a replay needs no
        # second read, a live stream no read before subscribing.
        run, durable = await self._durable_after(run_id, cursor)
        executing = _executing(run)
        # What the bus delivered during the read goes in with it, in order: a stored event the read
        # found may be newer than deltas already queued (they were published before it was
        # committed), and sending it first would leave them behind the client's position.
        catch_up = [*durable, *subscriber.drain()]
        if executing:
            catch_up += [e for e in subscriber.backlog if e.position.is_live]
        return executing, catch_up

    @contextlib.asynccontextmanager
    async def _watched(self, subscriber: LiveSubscriber, executing: bool) -> AsyncIterator[None]:
        """Without a bus that sees every writer: the process's silent-stream watch reads SQL for
        this stream, together with all the others (not for a replay of an ended run)."""
        if self.silent_streams is None or not executing:
            yield
            return
        with self.silent_streams.watching(subscriber):
            yield

    async def stop(self) -> None:
        if self.silent_streams is not None:
            await self.silent_streams.stop()

    @staticmethod
    def _backlog_from_the_start(subscriber: LiveSubscriber) -> bool:
        """The bus holds the run's events from its first one (`run_queued` / `run_started`, stored by
        the intake): no SQL read is needed to start. Every later event of this process reaches this
        bus; one of another process (a bus that does not see every writer, and a queued run claimed
        there) is found by the silent-stream watch, as after any first read."""
        backlog = subscriber.backlog
        return bool(backlog) and backlog[0].type in FIRST_EVENT_TYPES

    async def _durable_after(self, run_id: str, cursor: EventPosition) -> tuple[Run | None, list[LiveEvent]]:
        async with self.database.session() as session:
            # Status first: final events commit together with the status, so when this read sees
            # the run finished, the event read below sees every event it will ever have.
            run = await RunRepository(session).get(run_id)
            return run, await self._events_after(session, run_id, cursor)

    @staticmethod
    async def _events_after(session: AsyncSession, run_id: str, cursor: EventPosition) -> list[LiveEvent]:
        repository = RunEventRepository(session)
        found: list[LiveEvent] = []
        after_id = cursor.durable_id
        while True:
            rows = await repository.after(run_id, after_id, limit=REPLAY_BATCH)
            found += [LiveEvent(run_id, EventPosition(row.id), row.type, row.data) for row in rows]
            if len(rows) < REPLAY_BATCH:
                return found
            after_id = rows[-1].id


def _in_order_after(found: list[LiveEvent], cursor: EventPosition) -> list[LiveEvent]:
    """The events after `cursor`, each position once, in position order."""
    unique = {event.position: event for event in found if event.position > cursor}
    return [unique[position] for position in sorted(unique)]


def _executing(run: Run | None) -> bool:
    """Executing, queued, or about to be started: its stream goes on."""
    return run is not None and run.status not in STREAM_ENDING_STATUSES


def _source(event: LiveEvent) -> str:
    """Where a caught-up event came from: deltas from the bus's backlog, the rest from SQL."""
    return "bus" if event.position.is_live else "sql"
