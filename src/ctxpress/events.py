"""S20: the custom stream events of automatic compression.

Payloads go through LangGraph's stream writer (`stream_mode="custom"`), shaped
`{"type": "context_compression", "status": "started" | "completed" | "failed", "level": "l1" | "l2", …}`.
Every `started` is followed in the same model call by exactly one `completed` or `failed`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger("ctxpress.events")

EVENT_TYPE = "context_compression"
PRESSURE_EVENT_TYPE = "context_pressure"

Status = Literal["started", "completed", "failed"]
Level = Literal["l1", "l2"]
StreamWriter = Callable[[Any], None]


def _noop_writer(_: Any) -> None:
    return None


@dataclass
class CompressionEvents:
    """Emits the events of one model call and enforces the started → completed/failed pairing."""

    writer: StreamWriter = _noop_writer
    emitted: list[dict[str, Any]] = field(default_factory=list)
    _open: bool = False

    def _emit(self, payload: dict[str, Any]) -> None:
        self.emitted.append(payload)
        try:
            self.writer(payload)
        except Exception:  # a broken stream consumer must not break the model call
            logger.exception("could not write a context_compression event")

    def started(self, level: Level, tokens_before: int, **extra: Any) -> None:
        if self._open:
            return
        self._open = True
        self._emit(
            {"type": EVENT_TYPE, "status": "started", "level": level, "tokens_before": tokens_before, **extra}
        )

    def completed(self, level: Level, tokens_before: int, tokens_after: int, **extra: Any) -> None:
        if not self._open:
            return
        self._open = False
        self._emit(
            {
                "type": EVENT_TYPE,
                "status": "completed",
                "level": level,
                "tokens_before": tokens_before,
                "tokens_after": tokens_after,
                "tokens_saved": max(0, tokens_before - tokens_after),
                **extra,
            }
        )

    def failed(self, level: Level, error: str, **extra: Any) -> None:
        if not self._open:
            return
        self._open = False
        self._emit({"type": EVENT_TYPE, "status": "failed", "level": level, "error": error, **extra})

    @property
    def is_open(self) -> bool:
        return self._open

    def pressure(self, payload: dict[str, Any]) -> None:
        """The approximate size of the request sent to the main model (S22), for status panels."""
        self._emit({"type": PRESSURE_EVENT_TYPE, **payload})
