"""Manual compression (S17–S19, S28) and the context status panel (S22).

    POST /api/conversations/{id}/compress   synchronous maintenance request (no run is created)
    GET  /api/conversations/{id}/context    pressure of the next model input, last record, summary

Errors use the service's JSON shape, with one extra field saying why:
    409 {"error": {"code": "thread_busy", "reason": "running" | "waiting_input" | "queued", …}}
    502 / 500 {"error": {"code": "compression_failed", "part": "summary" | "history" | "compaction" | "checkpoint", …}}
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ctxpress.app.server.routes.deps import AUTHENTICATED_RESPONSES, ConversationDep, ServicesDep
from ctxpress.app.server.schemas import ErrorResponse
from ctxpress.app.server.usecases.compression import (
    CompressionFailedError,
    CompressionOutcome,
    ContextStatus,
    ThreadBusyError,
)
from ctxpress.pressure import RequestPressure
from ctxpress.summary.event import SummarizationEvent

router = APIRouter(
    prefix="/api/conversations",
    tags=["compression"],
    responses={**AUTHENTICATED_RESPONSES, 404: {"model": ErrorResponse}},
)


class CompressOut(BaseModel):
    conversation_id: str
    compressed: bool
    #: Why nothing was compressed (`compressed` false).
    reason: str | None
    tokens_before: int
    tokens_after: int
    #: Position in the full message list of the first message not summarised (cumulative).
    cutoff_index: int | None
    #: Workdir-relative path of the history file holding the summarised messages.
    file_path: str | None
    #: The summary message the model will see from now on.
    summary: str | None
    summary_count: int | None
    checkpoint_id: str | None

    @classmethod
    def of(cls, outcome: CompressionOutcome) -> CompressOut:
        event = outcome.event
        return cls(
            conversation_id=outcome.conversation_id,
            compressed=outcome.compressed,
            reason=outcome.reason,
            tokens_before=outcome.tokens_before,
            tokens_after=outcome.tokens_after,
            cutoff_index=event["cutoff_index"] if event else None,
            file_path=event["file_path"] if event else None,
            summary=str(event["summary_message"].content) if event else None,
            summary_count=event.get("summary_count") if event else None,
            checkpoint_id=outcome.checkpoint_id,
        )


class Breakdown(BaseModel):
    """Approximate tokens by part; they add up to the total (S12: never a bill)."""

    system: int
    tools: int
    summary: int
    messages: int

    @classmethod
    def of(cls, pressure: RequestPressure) -> Breakdown:
        return cls(
            system=pressure.system, tools=pressure.tools, summary=pressure.summary, messages=pressure.messages
        )


class RecordedRequestOut(BaseModel):
    """The last main-model request the middleware measured (its real shape, after any compaction)."""

    total_tokens: int
    threshold_tokens: int
    ratio: float
    breakdown: Breakdown
    run_id: str | None
    recorded_at: datetime | None


class SummaryOut(BaseModel):
    cutoff_index: int
    file_path: str | None
    summary_count: int | None

    @classmethod
    def of(cls, event: SummarizationEvent) -> SummaryOut:
        return cls(
            cutoff_index=event["cutoff_index"],
            file_path=event["file_path"],
            summary_count=event.get("summary_count"),
        )


class ContextOut(BaseModel):
    conversation_id: str
    agent: str
    #: The agent declares `context_compression` (the panel shows the compress button, S17).
    context_compression: bool
    threshold_tokens: int
    #: Approximate tokens of the next model input, from the current state (S22).
    estimated_tokens: int
    ratio: float
    #: ratio ≥ suggest_ratio (0.85) on an agent with the capability: a hint, never a trigger.
    suggest_compress: bool
    suggest_ratio: float
    breakdown: Breakdown
    message_count: int
    effective_message_count: int
    #: True after a manual compression until the next main-model call records a full figure (S19).
    stale: bool
    last_request: RecordedRequestOut | None
    invalidated_at: datetime | None
    summary: SummaryOut | None

    @classmethod
    def of(cls, status: ContextStatus) -> ContextOut:
        recorded = status.recorded
        last_request = None
        if recorded.pressure is not None:
            last_request = RecordedRequestOut(
                total_tokens=recorded.pressure.total,
                threshold_tokens=recorded.pressure.threshold,
                ratio=recorded.pressure.ratio,
                breakdown=Breakdown.of(recorded.pressure),
                run_id=recorded.run_id,
                recorded_at=recorded.recorded_at,
            )
        return cls(
            conversation_id=status.conversation_id,
            agent=status.agent,
            context_compression=status.capability,
            threshold_tokens=status.estimate.threshold,
            estimated_tokens=status.estimate.total,
            ratio=status.estimate.ratio,
            suggest_compress=status.suggest_compress,
            suggest_ratio=status.suggest_ratio,
            breakdown=Breakdown.of(status.estimate),
            message_count=status.message_count,
            effective_message_count=status.effective_message_count,
            stale=recorded.stale,
            last_request=last_request,
            invalidated_at=recorded.invalidated_at,
            summary=SummaryOut.of(status.summary) if status.summary else None,
        )


class ThreadBusyDetail(BaseModel):
    code: Literal["thread_busy"]
    reason: Literal["running", "waiting_input", "queued"]
    message: str
    details: dict[str, Any] | None = None


class ThreadBusyResponse(BaseModel):
    error: ThreadBusyDetail


class CompressionFailedDetail(BaseModel):
    code: Literal["compression_failed"]
    part: Literal["summary", "history", "compaction", "checkpoint"]
    message: str


class CompressionFailedResponse(BaseModel):
    error: CompressionFailedDetail


@router.post(
    "/{conversation_id}/compress",
    response_model=CompressOut,
    responses={
        400: {"model": ErrorResponse, "description": "The agent lacks the context_compression capability."},
        409: {"model": ThreadBusyResponse},
        500: {"model": CompressionFailedResponse, "description": "History file or state update failed."},
        502: {"model": CompressionFailedResponse, "description": "The summary model failed."},
    },
)
async def compress(conversation: ConversationDep, services: ServicesDep) -> CompressOut | JSONResponse:
    """Summarise older messages now (S17–S19). Synchronous; creates no run. 200 also when nothing is compressed."""
    try:
        outcome = await services.compression.compress(conversation)
    except ThreadBusyError as exc:
        return _error(exc.status_code, exc.code, exc.message, reason=exc.reason, details=exc.details)
    except CompressionFailedError as exc:
        return _error(exc.status_code, exc.code, exc.message, part=exc.part)
    return CompressOut.of(outcome)


@router.get("/{conversation_id}/context", response_model=ContextOut)
async def context(conversation: ConversationDep, services: ServicesDep) -> ContextOut:
    """Pressure of the next model input, the last recorded request, and the current summary (S22)."""
    return ContextOut.of(await services.compression.context_status(conversation))


def _error(status_code: int, code: str, message: str, **fields: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **fields}}, status_code=status_code)
