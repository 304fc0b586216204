"""Coalescing one run's token deltas into live `message_delta` events (never stored in SQL).

Consecutive deltas of the same message (same `message_id`, node and namespace) are joined until
`window_seconds` passed since the first of them or the text reached `max_chars`; any other event
of the run flushes first, so deltas and durable events keep their order. Each published delta gets
the position `<newest durable id>-<seq>` (`live_events.EventPosition`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.runtime.events import MESSAGE_DELTA
from ctxpress.app.server.runtime.live_events import EventPosition, LiveBus, LiveEvent


class DeltaStream:
    def __init__(
        self,
        run_id: str,
        *,
        bus: LiveBus,
        metrics: ServiceMetrics,
        window_seconds: float,
        max_chars: int,
        created_at_monotonic: float | None = None,
    ) -> None:
        self.run_id = run_id
        self._bus = bus
        self._metrics = metrics
        self._window = window_seconds
        self._max_chars = max_chars
        #: The id of the run's newest durable event published by this process.
        self.last_durable_id = 0
        self._seq = 0
        self._pending: dict[str, Any] | None = None
        self._pending_key: tuple[Any, ...] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._first_token_from = created_at_monotonic

    def note_durable(self, event_id: int) -> None:
        self.last_durable_id = max(self.last_durable_id, event_id)

    def add(self, data: dict[str, Any]) -> None:
        """One token chunk's `message_delta` payload (`message_id`, `delta`, `node`, maybe `namespace`)."""
        if self._first_token_from is not None:
            self._metrics.first_token.observe(max(0.0, time.monotonic() - self._first_token_from))
            self._first_token_from = None
        key = (data.get("message_id"), data.get("node"), tuple(data.get("namespace") or ()))
        if self._pending is not None and key != self._pending_key:
            self.flush()
        if self._pending is None:
            self._pending = dict(data)
            self._pending_key = key
            self._timer = asyncio.get_running_loop().call_later(self._window, self.flush)
        else:
            self._pending["delta"] += data["delta"]
        if len(self._pending["delta"]) >= self._max_chars:
            self.flush()

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending, self._pending_key = self._pending, None, None
        if pending is None:
            return
        self._seq += 1
        position = EventPosition(self.last_durable_id, self._seq)
        self._bus.publish(LiveEvent(self.run_id, position, MESSAGE_DELTA, pending))

    def close(self) -> None:
        self.flush()
