from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, status
from sse_starlette import EventSourceResponse

from ctxpress.app.server.errors import InvalidLastEventIdError, NotFoundError
from ctxpress.app.server.routes.deps import (
    AUTHENTICATED_RESPONSES,
    MAX_ROW_ID,
    CallerDep,
    ServicesDep,
    UserDep,
)
from ctxpress.app.server.routes.event_stream import run_event_stream
from ctxpress.app.server.runtime.live_events import POSITION_PATTERN, EventPosition
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
    caller: CallerDep,
    services: ServicesDep,
    last_event_id: Annotated[str | None, Header(description="Resume after this event id")] = None,
    after: Annotated[
        str | None,
        Query(
            max_length=40,
            pattern=POSITION_PATTERN,
            description="Same as Last-Event-ID, for clients without headers",
        ),
    ] = None,
) -> EventSourceResponse:
    """The run's events as SSE, each with an `id:`; reconnect with `Last-Event-ID` to continue.

    Event types: run_queued, run_started, message_delta, message, tool_call, tool_result,
    context_compression, context_pressure, usage, interrupt, run_finished, error, custom (the list, by
    name: `GET /api/vocabulary`). The stream ends when the run finishes or waits for input.

    Ids: every event but `message_delta` is stored, and its id is an integer (`41`).
    `message_delta` events (token text, joined over ≤ 50 ms or ≤ 512 characters) are live only: their
    id is `<stored id>-<n>` (`41-7`: the 7th delta of the run, sent after event 41). Ids only grow;
    resuming with either form yields every later event once, deltas included while the run executes.
    Once the run has ended its deltas are gone: a replay has the stored events only, and each
    `message` event carries the complete text the deltas before it spelled out.
    """
    cursor = EventPosition(0)
    for given in (after, last_event_id):
        if given is None:
            continue
        position = EventPosition.parse(given)
        if position is None or position.durable_id > MAX_ROW_ID:
            await services.auth.user_of(caller)  # a caller without a valid token hears 401 first
            raise InvalidLastEventIdError(
                "Last-Event-ID must be an event id (`41`, or `41-7` for a message_delta)"
            )
        cursor = max(cursor, position)
    # Authentication, the ownership check and the stream's first read in one transaction, before
    # the answer starts.
    first = await services.events.first_read(
        run_id, cursor, caller=caller.user_in, token_sha256=caller.token_sha256
    )
    if first is None:
        raise NotFoundError("run not found")
    return run_event_stream(services, run_id, cursor, first=first)
