"""Live run events: positions (the SSE ids), subscribers, and the in-process bus of the embedded default.

Durable events (stored in SQL, see `events.py`) have the integer id of their row. Live-only events
(the coalesced `message_delta`s) are never stored: each gets the position `<durable>-<seq>`, where
`<durable>` is the id of the run's newest durable event when it was published and `<seq>` counts the
run's live events. Sorting positions as `(durable, seq)` pairs (a durable event is `(id, 0)`) gives
the order the executor produced them in, so a client resuming with `Last-Event-ID: 41-7` receives
the deltas after the 7th (from the live buffer) and the durable events after 41 (from SQL), each once.

A bus carries every event of a run while it executes: durable ones after their transaction commits,
deltas as they are coalesced. Two buses share the `LiveBus` protocol: `MemoryLiveBus` here (one
process, no Redis) and `RedisLiveBus` (`redis_live_bus.py`: Redis Streams, several processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ctxpress.app.server.metrics import ServiceMetrics

#: `41` (a durable event) or `41-7` (the 7th live event of the run, published after event 41).
POSITION_PATTERN: Final = r"^[0-9]{1,19}(-[0-9]{1,19})?$"
_POSITION_RE: Final = re.compile(POSITION_PATTERN)
#: Undelivered events one slow SSE client may have queued before it is marked as having a gap.
SUBSCRIBER_QUEUE_LIMIT: Final = 10_000
#: How long the in-process buffer of a finished (or waiting) run is kept for late readers.
FINISHED_RUN_GRACE_SECONDS: Final = 60.0


@dataclass(frozen=True, order=True)
class EventPosition:
    durable_id: int
    seq: int = 0

    @property
    def is_live(self) -> bool:
        return self.seq > 0

    def __str__(self) -> str:
        return f"{self.durable_id}-{self.seq}" if self.seq else str(self.durable_id)

    @classmethod
    def parse(cls, text: str) -> EventPosition | None:
        """The position an SSE id names; None when `text` is not one."""
        text = text.strip()
        if not _POSITION_RE.match(text):
            return None
        durable, _, seq = text.partition("-")
        return cls(int(durable), int(seq or 0))


@dataclass(frozen=True)
class LiveEvent:
    run_id: str
    position: EventPosition
    type: str
    data: dict[str, Any]


class LiveSubscriber:
    """One SSE stream's queue of live events of one run (filled by the bus, drained by the stream)."""

    def __init__(self, run_id: str, *, limit: int = SUBSCRIBER_QUEUE_LIMIT) -> None:
        self.run_id = run_id
        #: What the bus held for the run when the subscription started (oldest first).
        self.backlog: list[LiveEvent] = []
        self._limit = limit
        self._items: deque[LiveEvent] = deque()
        self._ready = asyncio.Event()
        self._gap = False
        #: The newest stored event the stream has been given, by the bus or by its own reads: a
        #: stored event beyond it is one the stream still has to fetch (`silent_streams.py`).
        self.newest_durable_id = 0

    def saw(self, position: EventPosition) -> None:
        """The stream has this position (a delta's position implies its durable event)."""
        self.newest_durable_id = max(self.newest_durable_id, position.durable_id)

    def deliver(self, event: LiveEvent) -> bool:
        """Queue an event; False (and a gap) when the reader is too far behind."""
        if len(self._items) >= self._limit:
            self.mark_gap()
            return False
        self.saw(event.position)
        self._items.append(event)
        self._ready.set()
        return True

    def mark_gap(self) -> None:
        """Events may have been lost (a full queue, a broken bus connection): re-read SQL."""
        self._gap = True
        self._ready.set()

    def take_gap(self) -> bool:
        gap, self._gap = self._gap, False
        return gap

    def drain(self) -> list[LiveEvent]:
        """Everything queued now, without waiting."""
        batch = list(self._items)
        self._items.clear()
        return batch

    async def next_batch(self, timeout: float) -> list[LiveEvent]:
        """Everything queued, waiting up to `timeout` seconds for something; [] on timeout."""
        if not self._items and not self._gap:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # not `wait_for`: see `RunWorker._poll_loop`
                    await self._ready.wait()
        self._ready.clear()
        batch = list(self._items)
        self._items.clear()
        return batch


CancelHandler = Callable[[str], object]


class LiveBus(Protocol):
    """Where live events of runs travel, and cancel requests reach the process executing a run."""

    #: True when other processes see what this bus carries (Redis); False for one process only.
    shared: bool

    def publish(self, event: LiveEvent) -> None:
        """Hand an event to the bus (never blocks; a failure is counted as dropped, not raised)."""
        ...

    def subscribe(self, run_id: str) -> contextlib.AbstractAsyncContextManager[LiveSubscriber]: ...

    def on_cancel(self, handler: CancelHandler) -> None:
        """Call `handler(run_id)` when any process asks to cancel a run."""
        ...

    async def request_cancel(self, run_id: str) -> None: ...

    def run_ended(self, run_id: str) -> None:
        """The run finished or waits for input (its buffer may go)."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class _RunBuffer:
    events: deque[LiveEvent]
    subscribers: set[LiveSubscriber] = field(default_factory=set)
    last_publish: float = 0.0
    ended: bool = False


class MemoryLiveBus:
    """The embedded default: each run's recent events in memory, delivered to this process's streams."""

    shared = False

    def __init__(self, *, metrics: ServiceMetrics, maxlen: int) -> None:
        self._metrics = metrics
        self._maxlen = maxlen
        self._runs: dict[str, _RunBuffer] = {}
        self._cancel_handlers: list[CancelHandler] = []

    def _buffer(self, run_id: str) -> _RunBuffer:
        buffer = self._runs.get(run_id)
        if buffer is None:
            buffer = self._runs[run_id] = _RunBuffer(deque(maxlen=self._maxlen))
        return buffer

    def publish(self, event: LiveEvent) -> None:
        buffer = self._buffer(event.run_id)
        buffer.events.append(event)
        buffer.last_publish = time.monotonic()
        buffer.ended = False
        self._metrics.live_published.inc()
        for subscriber in buffer.subscribers:
            if not subscriber.deliver(event):
                self._metrics.live_dropped.inc()

    def run_ended(self, run_id: str) -> None:
        """The run finished or waits for input: drop its buffer a while later unless it continues."""
        buffer = self._runs.get(run_id)
        if buffer is None:
            return
        published_at = buffer.last_publish
        buffer.ended = True

        def forget() -> None:
            buffer = self._runs.get(run_id)
            if buffer is not None and buffer.last_publish == published_at and not buffer.subscribers:
                del self._runs[run_id]

        with contextlib.suppress(RuntimeError):  # no running loop (a synchronous caller): kept
            asyncio.get_running_loop().call_later(FINISHED_RUN_GRACE_SECONDS, forget)

    @contextlib.asynccontextmanager
    async def subscribe(self, run_id: str) -> AsyncIterator[LiveSubscriber]:
        subscriber = LiveSubscriber(run_id)
        buffer = self._buffer(run_id)
        subscriber.backlog = list(buffer.events)
        buffer.subscribers.add(subscriber)
        try:
            yield subscriber
        finally:
            buffer.subscribers.discard(subscriber)
            if not buffer.subscribers and (buffer.ended or not buffer.events):
                self._runs.pop(run_id, None)

    def on_cancel(self, handler: CancelHandler) -> None:
        self._cancel_handlers.append(handler)

    async def request_cancel(self, run_id: str) -> None:
        for handler in self._cancel_handlers:
            handler(run_id)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._runs.clear()
