"""S22: the approximate size of a model request, split the way a status panel shows it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from ctxpress.config import CompressionConfig
from ctxpress.summary.event import is_summary_message
from ctxpress.tokens import TokenCounter

#: The status panel suggests manual compression from this share of the threshold (hint only).
SUGGEST_COMPRESS_RATIO = 0.85


@dataclass(frozen=True)
class RequestPressure:
    total: int
    threshold: int
    system: int
    tools: int
    summary: int
    messages: int

    @property
    def ratio(self) -> float:
        return self.total / self.threshold if self.threshold else 0.0

    @property
    def suggest_compress(self) -> bool:
        return self.ratio >= SUGGEST_COMPRESS_RATIO


def measure_request(
    messages: Sequence[BaseMessage],
    system_message: SystemMessage | None,
    tools: Sequence[Any] | None,
    config: CompressionConfig,
    *,
    total: int | None = None,
    counter: TokenCounter | None = None,
) -> RequestPressure:
    """Total with `TokenCounter.count_request` (the one measure of every decision) and its breakdown.

    Pass `total` when the request was just counted, so it is not counted again, and the `counter`
    that counted it, so that the parts are found in its caches (a fresh counter otherwise).
    """
    profile = config.token_profile
    counter = counter if counter is not None else TokenCounter()
    if total is None:
        total = counter.count_request(messages, system_message, tools, profile)
    system = counter.count_message(system_message, profile) if system_message is not None else 0
    tool_tokens = counter.count_tools(tools, profile)
    summary = sum(counter.count_message(m, profile) for m in messages[:1] if is_summary_message(m))
    # Whatever is not system, tools or summary (messages and per-request overhead) is "messages",
    # so the parts always add up to the total the decisions used.
    return RequestPressure(
        total=total,
        threshold=config.threshold_tokens,
        system=system,
        tools=tool_tokens,
        summary=summary,
        messages=max(0, total - system - tool_tokens - summary),
    )
