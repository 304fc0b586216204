"""A stream's queue of live events (`runtime/live_events.LiveSubscriber`)."""

from __future__ import annotations

import asyncio

from ctxpress.app.server.runtime.live_events import EventPosition, LiveEvent, LiveSubscriber
from tests.cancellation import cancel_after


async def _cancel_as_an_event_arrives(loop_turns: int) -> bool | None:
    """Cancel a reader waiting for events `loop_turns` event-loop turns after one is delivered
    (`cancel_after`)."""
    subscriber = LiveSubscriber("run")
    reader = asyncio.create_task(subscriber.next_batch(timeout=30))
    await asyncio.sleep(0)
    subscriber.deliver(LiveEvent("run", EventPosition(1), "message", {}))
    return await cancel_after(reader, loop_turns)


def test_a_stream_cancelled_as_an_event_arrives_stays_cancelled() -> None:
    """A client gone (its stream cancelled) ends the stream. Python 3.11's `asyncio.wait_for`
    dropped a cancellation that arrived in the turn the wait ended, and the stream read on."""
    outcomes = [asyncio.run(_cancel_as_an_event_arrives(turns)) for turns in range(6)]
    cancelled_in_flight = [outcome for outcome in outcomes if outcome is not None]
    assert outcomes[-1] is None, "the last cancel must come after the read ended (the window is covered)"
    assert cancelled_in_flight and all(cancelled_in_flight)
