from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, status
from sse_starlette import EventSourceResponse, ServerSentEvent

from ctxpress.app.server.errors import InvalidLastEventIdError
from ctxpress.app.server.routes.deps import AUTHENTICATED_RESPONSES, MAX_ROW_ID, ServicesDep, UserDep
from ctxpress.app.server.runtime.events import EventLog
from ctxpress.app.server.schemas import ErrorResponse, ResumeRunRequest, RunOut

router = APIRouter(
    prefix="/api/runs",
    tags=["runs"],
    responses={**AUTHENTICATED_RESPONSES, 404: {"model": ErrorResponse}},
)


@router.get("/{run_id}", response_model=RunOut)
async def get_run(run_id: str, user: UserDep, services: ServicesDep) -> RunOut:
    return RunOut.of(await services.runs.get_owned(user, run_id))


@router.post(
    "/{run_id}/resume",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunOut,
    responses={
        409: {"model": ErrorResponse},
        413: {"model": ErrorResponse, "description": "The body is larger than `max_body_bytes`."},
    },
)
async def resume_run(run_id: str, body: ResumeRunRequest, user: UserDep, services: ServicesDep) -> RunOut:
    """Answer the question a run asked (`interrupt` event); the run continues."""
    return RunOut.of(await services.runs.resume(user, run_id, body.value, body.interrupt_id))


@router.post("/{run_id}/cancel", response_model=RunOut, responses={409: {"model": ErrorResponse}})
async def cancel_run(run_id: str, user: UserDep, services: ServicesDep) -> RunOut:
    return RunOut.of(await services.runs.cancel(user, run_id))


@router.get(
    "/{run_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "Server-sent events"},
        400: {"model": ErrorResponse, "description": "Last-Event-ID is not an event id."},
    },
)
async def run_events(
    run_id: str,
    user: UserDep,
    services: ServicesDep,
    last_event_id: Annotated[str | None, Header(description="Resume after this event id")] = None,
    after: Annotated[
        int | None,
        Query(ge=0, le=MAX_ROW_ID, description="Same as Last-Event-ID, for clients without headers"),
    ] = None,
) -> EventSourceResponse:
    """The run's events as SSE, each with an `id:`; reconnect with `Last-Event-ID` to continue.

    Event types: run_queued, run_started, message_delta, message, tool_call, tool_result,
    context_compression, context_pressure, usage, interrupt, run_finished, error, custom (the list, by
    name: `GET /api/vocabulary`). The stream ends when the run finishes or waits for input.
    """
    await services.runs.get_owned(user, run_id)
    cursor = after or 0
    if last_event_id is not None:
        text = last_event_id.strip()
        # ASCII digits only (str.isdigit also accepts "²", which int() refuses), within BIGINT.
        if not (text.isascii() and text.isdigit()) or int(text) > MAX_ROW_ID:
            raise InvalidLastEventIdError("Last-Event-ID must be an event id (a non-negative integer)")
        cursor = max(cursor, int(text))
    return EventSourceResponse(
        _as_sse(services.events, run_id, cursor), ping=int(max(1, services.settings.sse_ping_seconds))
    )


async def _as_sse(events: EventLog, run_id: str, cursor: int) -> AsyncIterator[ServerSentEvent]:
    async for event in events.follow(run_id, after_id=cursor):
        yield ServerSentEvent(
            data=json.dumps(event.data, ensure_ascii=False), event=event.type, id=str(event.id)
        )
