from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from sse_starlette import EventSourceResponse

from ctxpress.app.server.db.models import RUN_QUEUED
from ctxpress.app.server.routes.deps import (
    AUTHENTICATED_RESPONSES,
    MAX_ROW_ID,
    CallerDep,
    ConversationDep,
    ServicesDep,
    UserDep,
    UtcInstant,
)
from ctxpress.app.server.routes.event_stream import run_event_stream
from ctxpress.app.server.runtime.live_events import EventPosition
from ctxpress.app.server.schemas import (
    ConversationOut,
    ConversationPage,
    ConversationStatus,
    CreateConversationRequest,
    CreateRunRequest,
    ErrorResponse,
    MessageOut,
    MessagePage,
    RunAccepted,
    RunList,
    RunOut,
    StateOut,
    ThreadBusyResponse,
    UpdateConversationRequest,
    UsageOut,
)

router = APIRouter(
    prefix="/api/conversations",
    tags=["conversations"],
    responses={**AUTHENTICATED_RESPONSES, 404: {"model": ErrorResponse}},
)

PAGE_LIMIT_MAX = 500


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ConversationOut,
    responses={
        400: {"model": ErrorResponse, "description": "No agent of that name (`unknown_agent`)."},
        413: {"model": ErrorResponse, "description": "The body is larger than `max_body_bytes`."},
    },
)
async def create_conversation(
    body: CreateConversationRequest, user: UserDep, services: ServicesDep
) -> ConversationOut:
    conversation = await services.conversations.create(user, agent_name=body.agent, title=body.title)
    return ConversationOut.of(conversation)


@router.get("", response_model=ConversationPage)
async def list_conversations(
    user: UserDep,
    services: ServicesDep,
    before: Annotated[
        UtcInstant | None, Query(description="`next_before` of the previous page (with its UTC offset)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = 50,
    q: Annotated[str, Query(max_length=200, description="Only titles containing this text")] = "",
    archived: Annotated[
        bool, Query(description="The archived conversations instead of the listed ones")
    ] = False,
) -> ConversationPage:
    items = await services.conversations.list_owned(
        user, before=before, limit=limit, title_contains=q.strip(), archived=archived
    )
    return ConversationPage(
        items=[ConversationOut.of(item) for item in items],
        next_before=items[-1].created_at if len(items) == limit else None,
    )


@router.get("/{conversation_id}", response_model=ConversationOut)
async def get_conversation(conversation: ConversationDep) -> ConversationOut:
    return ConversationOut.of(conversation)


@router.patch(
    "/{conversation_id}",
    response_model=ConversationOut,
    responses={413: {"model": ErrorResponse, "description": "The body is larger than `max_body_bytes`."}},
)
async def update_conversation(
    body: UpdateConversationRequest, user: UserDep, conversation: ConversationDep, services: ServicesDep
) -> ConversationOut:
    """Rename (`title`) and/or archive (`archived`: hidden from the list, nothing is deleted)."""
    updated = await services.conversations.update(
        user, conversation.id, title=body.title, archived=body.archived
    )
    return ConversationOut.of(updated)


@router.get("/{conversation_id}/status", response_model=ConversationStatus)
async def conversation_status(conversation: ConversationDep, services: ServicesDep) -> ConversationStatus:
    return ConversationStatus.of(conversation.id, await services.runs.busy_state(conversation.id))


@router.post(
    "/{conversation_id}/runs",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunAccepted,
    responses={
        400: {"model": ErrorResponse},
        409: {
            "model": ThreadBusyResponse,
            "description": "`thread_busy` with reason `compressing`: a manual compression holds the "
            "conversation (S18). Answered at once, never after waiting for the compression; the "
            "message is not stored -- send it again after `Retry-After` seconds.",
            "headers": {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer"}}},
        },
        413: {"model": ErrorResponse},
    },
)
async def create_run(
    conversation_id: str, body: CreateRunRequest, caller: CallerDep, services: ServicesDep
) -> RunAccepted:
    """Send a message: the run starts now, or waits FIFO behind the conversation's active run. The
    message is in the chat record from this answer on; while a manual compression holds the
    conversation it is refused (409 `compressing`, `Retry-After`). An untitled conversation is
    named after its first message. A client that will read the run should send with `POST
    …/runs/stream` instead: a stream opened afterwards receives what the run produced meanwhile as
    a catch-up."""
    # One transaction authenticates the caller, checks the owner, stores the message and the run,
    # and names the conversation.
    intake = await services.runs.submit(caller, conversation_id, body.input)
    return RunAccepted(
        run=RunOut.of(intake.run),
        started=intake.started,
        queued=intake.run.status == RUN_QUEUED,
        position=intake.position,
        queued_because=intake.queued_because,
    )


@router.post(
    "/{conversation_id}/runs/stream",
    response_class=EventSourceResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "The run's events as server-sent events, as `GET /api/runs/{id}/events` "
            "sends them from its first one.",
            "headers": {
                "Location": {
                    "description": "The run (`/api/runs/{id}`): cancel it there, or continue a broken "
                    "stream at `…/events` with `Last-Event-ID`",
                    "schema": {"type": "string"},
                }
            },
        },
        400: {"model": ErrorResponse},
        409: {
            "model": ThreadBusyResponse,
            "description": "`thread_busy` with reason `compressing`, as for `POST …/runs`.",
            "headers": {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer"}}},
        },
        413: {"model": ErrorResponse},
    },
)
async def create_run_streaming(
    conversation_id: str, body: CreateRunRequest, caller: CallerDep, services: ServicesDep
) -> EventSourceResponse:
    """Send a message and read its run in the same request: `POST …/runs`, answered with the run's
    event stream (its first event `run_started`, or `run_queued` with the place and the reason)
    instead of the JSON acceptance. A refusal (404, 409 `compressing`, 413) comes before any event,
    as for `POST …/runs`; once the stream has begun the message is in the chat record. The `Location`
    header names the run; a client whose stream breaks continues at `GET /api/runs/{id}/events`
    with the last `id:` it read as `Last-Event-ID`."""
    intake = await services.runs.submit(caller, conversation_id, body.input, streamed_here=True)
    run_id = intake.run.id
    return run_event_stream(
        services, run_id, EventPosition(0), accepted_here=True, headers={"Location": f"/api/runs/{run_id}"}
    )


@router.get("/{conversation_id}/runs", response_model=RunList)
async def list_runs(
    conversation: ConversationDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = 50,
) -> RunList:
    runs = await services.runs.list_for_conversation(conversation.id, limit=limit)
    return RunList(items=[RunOut.of(run) for run in runs])


@router.get("/{conversation_id}/messages", response_model=MessagePage)
async def list_messages(
    conversation: ConversationDep,
    services: ServicesDep,
    after: Annotated[int, Query(ge=0, le=MAX_ROW_ID, description="`next_after` of the previous page")] = 0,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = 100,
) -> MessagePage:
    """The complete chat record, oldest first: every user, assistant and tool message, never compressed."""
    messages = await services.conversations.messages(conversation, after=after, limit=limit)
    return MessagePage(
        items=[MessageOut.of(message) for message in messages],
        next_after=messages[-1].id if len(messages) == limit else None,
    )


@router.get("/{conversation_id}/state", response_model=StateOut)
async def get_state(conversation: ConversationDep, services: ServicesDep) -> StateOut:
    """The agent state through the agent's compiled graph, including `_summarization_event`."""
    state = await services.conversations.agent_state(conversation)
    return StateOut(
        conversation_id=conversation.id,
        agent=state.agent,
        checkpoint_id=state.checkpoint_id,
        values=state.values,
        next=state.next,
        interrupts=state.interrupts,
    )


@router.get("/{conversation_id}/usage", response_model=UsageOut)
async def get_usage(conversation: ConversationDep, services: ServicesDep) -> UsageOut:
    return UsageOut.model_validate(await services.usage.summary(conversation.id))
