"""Manual compression (S17–S19, S28) and the context status panel (S22).

    POST /api/conversations/{id}/compress   synchronous maintenance request (no run is created)
    GET  /api/conversations/{id}/context    pressure of the next model input, last record, summary
    GET  /api/conversations/{id}/compressions   every compression so far, from the record

Errors are raised by the service and rendered like every other (`errors.py`), with one extra field
saying why: `reason` of 409 `thread_busy`, `part` of 500 / 502 `compression_failed`.
"""

from __future__ import annotations

from fastapi import APIRouter

from ctxpress.app.server.routes.deps import AUTHENTICATED_RESPONSES, ConversationDep, ServicesDep
from ctxpress.app.server.schemas import (
    CompressionFailedResponse,
    CompressionList,
    CompressionRecordOut,
    CompressOut,
    ContextOut,
    ErrorResponse,
    ThreadBusyResponse,
)

router = APIRouter(
    prefix="/api/conversations",
    tags=["compression"],
    responses={**AUTHENTICATED_RESPONSES, 404: {"model": ErrorResponse}},
)


@router.post(
    "/{conversation_id}/compress",
    response_model=CompressOut,
    responses={
        400: {"model": ErrorResponse, "description": "The agent lacks the context_compression capability."},
        409: {
            "model": ThreadBusyResponse,
            "description": "`thread_busy`: a run is running, waits for input or is queued, or another "
            "compression holds the conversation (`compressing`, with `Retry-After`).",
        },
        500: {"model": CompressionFailedResponse, "description": "History file or state update failed."},
        502: {"model": CompressionFailedResponse, "description": "The summary model failed."},
    },
)
async def compress(conversation: ConversationDep, services: ServicesDep) -> CompressOut:
    """Summarise older messages now (S17–S19). Synchronous; creates no run. 200 also when nothing is compressed."""
    return CompressOut.of(await services.compression.compress(conversation))


@router.get("/{conversation_id}/context", response_model=ContextOut)
async def context(conversation: ConversationDep, services: ServicesDep) -> ContextOut:
    """Pressure of the next model input, the last recorded request, and the current summary (S22)."""
    return ContextOut.of(await services.compression.context_status(conversation))


@router.get("/{conversation_id}/compressions", response_model=CompressionList)
async def compressions(conversation: ConversationDep, services: ServicesDep) -> CompressionList:
    """Every compression of the conversation, oldest first: automatic ones (from its runs' events,
    without `started` halves and L1 passes that changed nothing) and manual ones."""
    records = await services.compression_history.of_conversation(conversation)
    return CompressionList(items=[CompressionRecordOut.of(record) for record in records])
