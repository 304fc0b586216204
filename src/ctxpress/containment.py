"""Containment: a rule that raises costs its own result, never the model call.

The middleware sits in every model call and reads shapes nobody here wrote: tool results, tool-call
arguments, state another middleware left. Each rule that reads them (the L1 previews and argument
offload, S7–S13; the summary transcript, S14; the references section; the pressure figure, S22)
runs through `contain`: on an exception it logs one line naming the rule, records a `Degradation`
and returns the rule's fallback (the generic head/middle/tail preview, the message as it was, no
section). The compression event reports the degradations (`degraded`, S20). Only the documented
errors leave the middleware: `ContextOverflowError` and `SummarizerConflictError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

logger = logging.getLogger("ctxpress.containment")

T = TypeVar("T")

#: The rules' names, as the `degraded` entries and the log lines give them.
RULE_ARGUMENTS = "S7 tool-call arguments"
RULE_TOOL_RESULT = "S8 tool-result offload"
RULE_RETRIEVAL_PREVIEW = "S9 retrieval preview"
RULE_TEXT_PREVIEW = "S10 text preview"
RULE_TRANSCRIPT = "S14 summary transcript"
RULE_REFERENCES = "S14 references section"
RULE_PRESSURE = "S22 pressure"
RULE_FLOW = "compression flow"


@dataclass(frozen=True)
class Degradation:
    """A rule that raised and the fallback that took its place."""

    rule: str
    error: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.error}"


def error_line(exc: BaseException, limit: int = 160) -> str:
    """Type and first line of an error, its text cut to `limit` characters (no provider bodies or
    paths of any length)."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first[:limit]}" if first else type(exc).__name__


def contain(
    rule: str,
    action: Callable[[], T],
    fallback: Callable[[], T],
    degraded: list[Degradation] | None = None,
) -> T:
    """`action()`, or `fallback()` when it raises; the failure is logged once and recorded."""
    try:
        return action()
    except Exception as exc:
        degradation = Degradation(rule, error_line(exc))
        logger.warning("ctxpress rule failed, fallback used (%s)", degradation, exc_info=exc)
        if degraded is not None:
            degraded.append(degradation)
        return fallback()


def constant(value: T) -> Callable[[], T]:
    """A fallback that gives `value` (bound now, not when the loop around it has moved on)."""
    return lambda: value
