"""The live bus on Redis Streams, for several service processes (`redis_url` set).

- Each run has a stream `<prefix>:live:<run id>` (`XADD … MAXLEN ~ maxlen`, expiring `ttl` seconds
  after its last entry). Publishing never waits: events go to a local queue that one writer task
  sends in pipelined batches, in order.
- One reader task per process (`XREAD BLOCK`) reads the streams of the runs its SSE clients follow,
  plus the control stream `<prefix>:live-control` (cancel requests), and fans entries out to its
  local subscribers. A new subscriber first reads the run's stream so far (`XRANGE`: the backlog a
  resuming client needs), then receives what the reader reads after it.
- Redis unreachable: publishing counts the lost events as dropped, the reader marks every
  subscriber as having a gap (their streams re-read SQL, so durable events still arrive) and
  retries; deltas published meanwhile are lost, and the complete `message` still arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.runtime.live_events import CancelHandler, EventPosition, LiveEvent, LiveSubscriber

logger = logging.getLogger(__name__)

#: How long one `XREAD` waits; also the longest a new subscription waits to be included.
READ_BLOCK_MS: Final = 100
READ_COUNT: Final = 1000
WRITE_BATCH: Final = 500
OUTGOING_LIMIT: Final = 100_000
CONTROL_MAXLEN: Final = 1000
RETRY_SECONDS: Final = 0.5

StreamId = tuple[int, int]


def _stream_id(raw: bytes | str) -> StreamId:
    text = raw.decode() if isinstance(raw, bytes) else raw
    millis, _, seq = text.partition("-")
    return int(millis), int(seq or 0)


def _format_id(value: StreamId) -> str:
    return f"{value[0]}-{value[1]}"


@dataclass(eq=False)
class _Handle:
    """One local subscriber of a run's stream and the newest entry it was given."""

    subscriber: LiveSubscriber
    after: StreamId


class RedisLiveBus:
    shared = True

    def __init__(
        self, redis: Redis, *, prefix: str, maxlen: int, ttl_seconds: int, metrics: ServiceMetrics
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._maxlen = maxlen
        self._ttl = ttl_seconds
        self._metrics = metrics
        self._outgoing: asyncio.Queue[tuple[str, dict[str, str]]] = asyncio.Queue(maxsize=OUTGOING_LIMIT)
        self._subscribers: dict[str, set[_Handle]] = {}
        self._positions: dict[str, StreamId] = {}
        self._control_position: StreamId = (0, 0)
        self._cancel_handlers: list[CancelHandler] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._healthy = True

    # --- keys --------------------------------------------------------------------------------------

    def run_key(self, run_id: str) -> str:
        return f"{self._prefix}:live:{run_id}"

    @property
    def control_key(self) -> str:
        return f"{self._prefix}:live-control"

    # --- publishing --------------------------------------------------------------------------------

    def publish(self, event: LiveEvent) -> None:
        fields = {
            "p": str(event.position),
            "t": event.type,
            "d": json.dumps(event.data, ensure_ascii=False),
        }
        try:
            self._outgoing.put_nowait((event.run_id, fields))
        except asyncio.QueueFull:
            self._metrics.live_dropped.inc()
            return
        self._metrics.live_published.inc()

    async def _write_loop(self) -> None:
        while True:
            batch = [await self._outgoing.get()]
            while len(batch) < WRITE_BATCH and not self._outgoing.empty():
                batch.append(self._outgoing.get_nowait())
            try:
                await self._write(batch)
            except (RedisError, OSError) as exc:
                self._metrics.live_dropped.inc(len(batch))
                logger.warning("live events: %d lost, Redis unreachable (%s)", len(batch), exc)

    async def _write(self, batch: list[tuple[str, dict[str, str]]]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        keys: set[str] = set()
        for run_id, fields in batch:
            key = self.run_key(run_id)
            keys.add(key)
            pipe.xadd(key, fields, maxlen=self._maxlen, approximate=True)  # type: ignore[arg-type]
        for key in keys:
            pipe.expire(key, self._ttl)
        await pipe.execute()

    # --- reading -----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def subscribe(self, run_id: str) -> AsyncIterator[LiveSubscriber]:
        subscriber = LiveSubscriber(run_id)
        after: StreamId = (0, 0)
        try:
            entries: Any = await self._redis.xrange(self.run_key(run_id), count=self._maxlen + 1000)
        except (RedisError, OSError) as exc:
            logger.warning("live events: run %s backlog unreadable (%s)", run_id, exc)
            entries = []
            subscriber.mark_gap()
        for entry_id, fields in entries:
            after = _stream_id(entry_id)
            if (event := _decode(run_id, fields)) is not None:
                subscriber.backlog.append(event)
        handle = _Handle(subscriber, after)
        key = self.run_key(run_id)
        self._subscribers.setdefault(key, set()).add(handle)
        current = self._positions.get(key)
        self._positions[key] = after if current is None else min(current, after)
        try:
            yield subscriber
        finally:
            handles = self._subscribers.get(key)
            if handles is not None:
                handles.discard(handle)
                if not handles:
                    del self._subscribers[key]
                    self._positions.pop(key, None)

    async def _read_loop(self) -> None:
        while True:
            streams: dict[Any, Any] = {self.control_key: _format_id(self._control_position)}
            streams.update({key: _format_id(position) for key, position in self._positions.items()})
            try:
                reply: Any = await self._redis.xread(streams, count=READ_COUNT, block=READ_BLOCK_MS)
            except (RedisError, OSError) as exc:
                self._lost_connection(exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            if not self._healthy:
                self._healthy = True
                logger.warning("live events: Redis reachable again")
            for raw_key, entries in reply or []:
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                if key == self.control_key:
                    self._control(entries)
                else:
                    self._fan_out(key, entries)

    def _lost_connection(self, exc: BaseException) -> None:
        if self._healthy:
            logger.warning("live events: Redis unreachable (%s); streams fall back to SQL", exc)
        self._healthy = False
        # A restarted Redis numbers its entries afresh: read each stream from its start again
        # (the streams skip what they already sent by its event position).
        for key in self._positions:
            self._positions[key] = (0, 0)
        for handles in self._subscribers.values():
            for handle in handles:
                handle.subscriber.mark_gap()
                handle.after = (0, 0)

    def _fan_out(self, key: str, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        handles = self._subscribers.get(key)
        if not handles:
            return
        run_id = key.removeprefix(f"{self._prefix}:live:")
        for entry_id, fields in entries:
            position = _stream_id(entry_id)
            if key in self._positions:
                self._positions[key] = max(self._positions[key], position)
            event = _decode(run_id, fields)
            if event is None:
                continue
            for handle in handles:
                if position <= handle.after:
                    continue
                handle.after = position
                if not handle.subscriber.deliver(event):
                    self._metrics.live_dropped.inc()

    def _control(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        for entry_id, fields in entries:
            self._control_position = max(self._control_position, _stream_id(entry_id))
            run_id = fields.get(b"cancel")
            if run_id:
                for handler in self._cancel_handlers:
                    handler(run_id.decode())

    def run_ended(self, run_id: str) -> None:
        return None  # the stream expires `ttl` seconds after its last entry

    # --- cancel --------------------------------------------------------------------------------------

    def on_cancel(self, handler: CancelHandler) -> None:
        self._cancel_handlers.append(handler)

    async def request_cancel(self, run_id: str) -> None:
        try:
            await self._redis.xadd(
                self.control_key, {"cancel": run_id}, maxlen=CONTROL_MAXLEN, approximate=True
            )
        except (RedisError, OSError) as exc:
            # The executing process still sees the flag in SQL at its next lease heartbeat.
            logger.warning("cancel of run %s not announced through Redis (%s)", run_id, exc)
        for handler in self._cancel_handlers:
            handler(run_id)  # executing here: at once

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            newest: Any = await self._redis.xrevrange(self.control_key, count=1)
            if newest:
                self._control_position = _stream_id(newest[0][0])
        except (RedisError, OSError) as exc:
            logger.warning("live events: Redis unreachable at start (%s); retrying in the background", exc)
        self._tasks = [
            asyncio.create_task(self._write_loop(), name="ctxpress-live-writer"),
            asyncio.create_task(self._read_loop(), name="ctxpress-live-reader"),
        ]

    async def stop(self) -> None:
        # Let the writer send what is queued (the last events of runs stopped at shutdown).
        for _ in range(50):
            if self._outgoing.empty():
                break
            await asyncio.sleep(0.02)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)


def _decode(run_id: str, fields: dict[Any, Any]) -> LiveEvent | None:
    def text(name: str) -> str | None:
        value = fields.get(name.encode(), fields.get(name))
        return value.decode() if isinstance(value, bytes) else value

    position = EventPosition.parse(text("p") or "")
    event_type = text("t")
    if position is None or event_type is None:
        return None
    try:
        data = json.loads(text("d") or "{}")
    except ValueError:
        return None
    return LiveEvent(run_id, position, event_type, data if isinstance(data, dict) else {})
