"""A run's events as an SSE response (`GET /api/runs/{id}/events`, `POST …/runs/stream`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

from ctxpress.app.server.runtime.container import Services
from ctxpress.app.server.runtime.events import FirstRead
from ctxpress.app.server.runtime.live_events import EventPosition


def run_event_stream(
    services: Services,
    run_id: str,
    after: EventPosition,
    *,
    accepted_here: bool = False,
    first: FirstRead | None = None,
    headers: dict[str, str] | None = None,
) -> EventSourceResponse:
    """The run's events after `after` until it finishes or waits for input, each with its `id:`
    (`accepted_here`: a run this request's intake has just created, followed from its start;
    `first`: the stream's first read, made with the ownership check)."""
    return EventSourceResponse(
        _as_sse(services, run_id, after, accepted_here, first),
        ping=int(max(1, services.settings.sse_ping_seconds)),
        headers=headers,
    )


async def _as_sse(
    services: Services, run_id: str, cursor: EventPosition, accepted_here: bool, first: FirstRead | None
) -> AsyncIterator[ServerSentEvent]:
    clients = services.metrics.sse_clients
    clients.inc()
    try:
        async for event in services.events.follow(
            run_id, after=cursor, accepted_here=accepted_here, first=first
        ):
            yield ServerSentEvent(
                data=json.dumps(event.data, ensure_ascii=False), event=event.type, id=str(event.position)
            )
    finally:
        clients.dec()
