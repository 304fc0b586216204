"""S20, S22: the custom stream events of the library — their names, statuses, levels and payloads.

Defined here once; the middleware emits them, the service streams them as SSE events of the same
name, and doctor and replay read them back. They go through LangGraph's stream writer
(`stream_mode="custom"`). Payloads are TypedDicts of plain values (str, int, float, bool, lists),
so they serialise to JSON as they are:

    {"type": "context_compression", "status": "started" | "completed" | "failed", "level": "l1" | "l2", …}
    {"type": "context_pressure", "total": …, "threshold": …, "system": …, …}

Every `started` is followed in the same model call by exactly one `completed` or `failed`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, TypedDict

from ctxpress.pressure import RequestPressure

logger = logging.getLogger("ctxpress.events")

# --- names and values ----------------------------------------------------------------------------

#: The `type` of every custom stream event the library writes (the service's SSE event names).
CONTEXT_COMPRESSION: Final = "context_compression"
CONTEXT_PRESSURE: Final = "context_pressure"
EventName = Literal["context_compression", "context_pressure"]
EVENT_NAMES: Final[tuple[EventName, ...]] = (CONTEXT_COMPRESSION, CONTEXT_PRESSURE)

STARTED: Final = "started"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
Status = Literal["started", "completed", "failed"]
STATUSES: Final[tuple[Status, ...]] = (STARTED, COMPLETED, FAILED)

#: L1: tool results offloaded / arguments truncated (S7–S13); L2: older messages summarised (S14).
L1: Final = "l1"
L2: Final = "l2"
Level = Literal["l1", "l2"]
LEVELS: Final[tuple[Level, ...]] = (L1, L2)

#: Why a compression ran although the estimate was below the threshold (S6: the model overflowed).
CONTEXT_OVERFLOW: Final = "context_overflow"
Reason = Literal["context_overflow"]
REASONS: Final[tuple[Reason, ...]] = (CONTEXT_OVERFLOW,)

# --- payloads --------------------------------------------------------------------------------------


class CompressionDetails(TypedDict, total=False):
    """What a completed compression did: L1's files and counts, L2's cutoff and history file."""

    files_written: list[str]
    offloaded: int
    arguments_truncated: int
    offload_failures: int
    cutoff_index: int
    file_path: str | None
    summary_error: str
    history_error: str
    #: Forced path only (S30): kept tool results trimmed further and written to the state.
    trimmed_tool_results: int
    #: Rules that raised and whose fallback was used, as "rule: error" (ctxpress.containment).
    degraded: list[str]


class CompressionStarted(TypedDict):
    type: Literal["context_compression"]
    status: Literal["started"]
    level: Level
    tokens_before: int
    #: The threshold that was reached (automatic path).
    threshold: NotRequired[int]
    reason: NotRequired[Reason]


class CompressionCompleted(CompressionDetails):
    type: Literal["context_compression"]
    status: Literal["completed"]
    level: Level
    tokens_before: int
    tokens_after: int
    tokens_saved: int
    reason: NotRequired[Reason]


class CompressionFailed(TypedDict):
    type: Literal["context_compression"]
    status: Literal["failed"]
    level: Level
    error: str
    reason: NotRequired[Reason]


CompressionEvent = CompressionStarted | CompressionCompleted | CompressionFailed


class PressureEvent(TypedDict):
    """S22: the approximate size of the request the main model just received, for status panels."""

    type: Literal["context_pressure"]
    total: int
    threshold: int
    system: int
    tools: int
    summary: int
    messages: int
    ratio: float
    suggest_compress: bool


def pressure_event(pressure: RequestPressure) -> PressureEvent:
    return PressureEvent(
        type=CONTEXT_PRESSURE,
        total=pressure.total,
        threshold=pressure.threshold,
        system=pressure.system,
        tools=pressure.tools,
        summary=pressure.summary,
        messages=pressure.messages,
        ratio=pressure.ratio,
        suggest_compress=pressure.suggest_compress,
    )


# --- emitting ------------------------------------------------------------------------------------

StreamWriter = Callable[[Any], None]


def _noop_writer(_: Any) -> None:
    return None


@dataclass
class CompressionEvents:
    """Emits the compression events of one model call and enforces the started → completed/failed pairing."""

    writer: StreamWriter = _noop_writer
    _open: bool = False

    def _emit(self, payload: CompressionEvent) -> None:
        try:
            self.writer(payload)
        except Exception:  # a broken stream consumer must not break the model call
            logger.exception("could not write a %s event", CONTEXT_COMPRESSION)

    def started(
        self, level: Level, tokens_before: int, *, threshold: int | None = None, reason: Reason | None = None
    ) -> None:
        if self._open:
            return
        self._open = True
        payload = CompressionStarted(
            type=CONTEXT_COMPRESSION, status=STARTED, level=level, tokens_before=tokens_before
        )
        if threshold is not None:
            payload["threshold"] = threshold
        if reason is not None:
            payload["reason"] = reason
        self._emit(payload)

    def completed(
        self,
        level: Level,
        tokens_before: int,
        tokens_after: int,
        details: CompressionDetails | None = None,
        *,
        reason: Reason | None = None,
    ) -> None:
        if not self._open:
            return
        self._open = False
        payload = CompressionCompleted(
            type=CONTEXT_COMPRESSION,
            status=COMPLETED,
            level=level,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            tokens_saved=max(0, tokens_before - tokens_after),
        )
        if reason is not None:
            payload["reason"] = reason
        payload.update(details or {})
        self._emit(payload)

    def failed(self, level: Level, error: str, *, reason: Reason | None = None) -> None:
        if not self._open:
            return
        self._open = False
        payload = CompressionFailed(type=CONTEXT_COMPRESSION, status=FAILED, level=level, error=error)
        if reason is not None:
            payload["reason"] = reason
        self._emit(payload)
