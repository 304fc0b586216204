"""Manual ("active") compression (S17–S19, S28): the L2 step on demand, outside any model call.

Unlike the automatic path it needs *both* the history file and the summary: if either fails it
raises `ManualCompressionError` naming the part, and no new `_summarization_event` is produced.
The caller (the service) holds the conversation lock and writes the returned event through the
agent's compiled graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, SystemMessage

from ctxpress.compaction import CompactionCache, compact_view
from ctxpress.config import CompressionConfig
from ctxpress.summary.event import SummarizationEvent, effective_messages
from ctxpress.summary.step import SaveAndSummarize, SavedSummary, SummaryStep, save_history, summary_step
from ctxpress.summary.summarizer import asummarize
from ctxpress.tokens import TokenCounter
from ctxpress.workdir import Workdir

FailedPart = Literal["history", "summary", "compaction"]


class ManualCompressionError(Exception):
    """Manual compression failed; `part` says which half (S28)."""

    def __init__(self, part: FailedPart, message: str) -> None:
        super().__init__(message)
        self.part = part


@dataclass(frozen=True)
class ManualCompressionResult:
    compressed: bool
    tokens_before: int
    tokens_after: int
    reason: str | None = None
    event: SummarizationEvent | None = None

    @property
    def cutoff_index(self) -> int | None:
        return self.event["cutoff_index"] if self.event else None

    @property
    def file_path(self) -> str | None:
        return self.event["file_path"] if self.event else None

    @property
    def summary_text(self) -> str | None:
        return str(self.event["summary_message"].content) if self.event else None


async def compress_now(
    messages: Sequence[BaseMessage],
    event: Any,
    *,
    config: CompressionConfig,
    workdir: Workdir,
    summary_model: BaseChatModel,
    system_message: SystemMessage | None = None,
    tools: Sequence[Any] = (),
    thread_id: str | None = None,
    summary_timeout: float | None = 120.0,
    cache: CompactionCache | None = None,
    counter: TokenCounter | None = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> ManualCompressionResult:
    """Summarise what the current event does not cover yet; return the new event (not applied).

    Pass the agent middleware's `compaction_cache` and `token_counter` to reuse what its model calls
    already decided and counted (fresh ones otherwise).
    """
    effective = effective_messages(messages, event)
    profile = config.token_profile
    counter = counter if counter is not None else TokenCounter()
    tokens_before = counter.count_request(effective.messages, system_message, tools, profile)
    since_cutoff = len(messages) - effective.cutoff_index
    if since_cutoff <= config.summary_keep_messages:
        return ManualCompressionResult(
            compressed=False,
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            reason=(
                f"only {since_cutoff} messages since the last summary; at least "
                f"{config.summary_keep_messages + 1} are needed (summary_keep_messages are kept)"
            ),
        )
    l1 = await asyncio.to_thread(compact_view, effective.messages, config, workdir, cache=cache)
    if l1.failures:
        # S13 holds (failed results stay whole in the view), but manual compression promises a
        # complete history: say which part failed instead of publishing a partial one.
        first = l1.failures[0]
        raise ManualCompressionError("compaction", f"could not store a large tool result: {first.reason}")
    step_flow = summary_step(effective, l1.messages, messages, config, thread_id)
    step: SummaryStep | None
    try:
        effect: SaveAndSummarize = next(step_flow)
    except StopIteration as done:
        step = done.value
    else:
        # In order, unlike the automatic path: a failed summary must not leave a history file
        # that no event will ever name (S28 publishes nothing on failure).
        outcome = await asummarize(
            summary_model, config, effect.messages, summary_timeout, callbacks, counter=counter
        )
        if not outcome.ok:
            raise ManualCompressionError("summary", f"the summary model failed: {outcome.error}")
        file_path, write_error = await asyncio.to_thread(save_history, workdir, effect)
        if write_error:
            raise ManualCompressionError("history", f"could not save the history file: {write_error}")
        try:
            step_flow.send(SavedSummary(file_path, None, outcome))
        except StopIteration as done:
            step = done.value
        else:  # pragma: no cover - the step yields exactly once
            raise RuntimeError("summary step yielded twice")
    if step is None:
        return ManualCompressionResult(
            compressed=False,
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            reason="no safe cutoff: every older message belongs to an unfinished tool-call batch",
        )
    tokens_after = counter.count_request(step.view, system_message, tools, profile)
    return ManualCompressionResult(True, tokens_before, tokens_after, event=step.event)
