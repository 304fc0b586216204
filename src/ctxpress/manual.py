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
from enum import StrEnum
from typing import Any, Final, Literal

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, SystemMessage

from ctxpress.compaction import CompactionCache, compact_view
from ctxpress.config import CompressionConfig
from ctxpress.errors import CtxpressError
from ctxpress.summary.event import SummarizationEvent, effective_messages
from ctxpress.summary.step import SavedSummary, finish_summary, keep_that_fits, plan_summary, save_history
from ctxpress.summary.summarizer import asummarize
from ctxpress.tokens import TokenCounter
from ctxpress.workdir import Workdir


class FailedPart(StrEnum):
    """Which part of a manual compression failed (S28); the values are what the service reports."""

    COMPACTION = "compaction"  # storing a large tool result for the L1 view
    SUMMARY = "summary"  # the summary model
    HISTORY = "history"  # the history file
    CHECKPOINT = "checkpoint"  # the caller storing the returned event in the agent state


class ManualCompressionError(CtxpressError):
    """Manual compression failed; `part` says which part (S28)."""

    def __init__(self, part: FailedPart, message: str) -> None:
        super().__init__(message)
        self.part = part


#: Why nothing was compressed (`ManualCompressionResult.reason_code`; clients find words for these).
TOO_FEW_MESSAGES: Final = "too_few_messages"
NO_SAFE_CUTOFF: Final = "no_safe_cutoff"
NothingToCompress = Literal["too_few_messages", "no_safe_cutoff"]
NOTHING_TO_COMPRESS: Final[tuple[NothingToCompress, ...]] = (TOO_FEW_MESSAGES, NO_SAFE_CUTOFF)


@dataclass(frozen=True)
class ManualCompressionResult:
    compressed: bool
    tokens_before: int
    tokens_after: int
    reason: str | None = None
    event: SummarizationEvent | None = None
    #: `reason` as a stable code, with the figures it names (`too_few_messages`).
    reason_code: NothingToCompress | None = None
    messages_since_summary: int | None = None
    messages_needed: int | None = None

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
    # Over the threshold, the summary reaches into the keep window (S14: kept "preferably"), so
    # any conversation can be brought back under it.
    if since_cutoff <= config.summary_keep_messages and tokens_before < config.threshold_tokens:
        return ManualCompressionResult(
            compressed=False,
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            reason=(
                f"only {since_cutoff} messages since the last summary; at least "
                f"{config.summary_keep_messages + 1} are needed (summary_keep_messages are kept)"
            ),
            reason_code=TOO_FEW_MESSAGES,
            messages_since_summary=since_cutoff,
            messages_needed=config.summary_keep_messages + 1,
        )
    l1 = await asyncio.to_thread(compact_view, effective.messages, config, workdir, cache=cache)
    if l1.failures:
        # S13 holds (failed results stay whole in the view), but manual compression promises a
        # complete history: say which part failed instead of publishing a partial one.
        first = l1.failures[0]
        raise ManualCompressionError(
            FailedPart.COMPACTION, f"could not store a large tool result: {first.reason}"
        )
    keep = config.summary_keep_messages
    if tokens_before >= config.threshold_tokens:

        def kept_fits(kept: Sequence[BaseMessage]) -> bool:  # as the next call sends it: its L1 view
            shown = l1.messages[len(l1.messages) - len(kept) :]
            return counter.count_request(shown, system_message, tools, profile) < config.threshold_tokens

        keep = keep_that_fits(effective, keep, kept_fits)
    plan = plan_summary(effective, l1.messages, messages, config, thread_id, keep)
    if plan is None:
        return ManualCompressionResult(
            compressed=False,
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            reason="no safe cutoff: every older message belongs to an unfinished tool-call batch",
            reason_code=NO_SAFE_CUTOFF,
        )
    # In order, unlike the automatic path: a failed summary must not leave a history file that no
    # event will ever name (S28 publishes nothing on failure).
    outcome = await asummarize(
        summary_model, config, plan.messages, summary_timeout, callbacks, counter=counter
    )
    if not outcome.ok:
        raise ManualCompressionError(FailedPart.SUMMARY, f"the summary model failed: {outcome.error}")
    saved = await asyncio.to_thread(save_history, workdir, plan)
    if saved.write_error:
        raise ManualCompressionError(
            FailedPart.HISTORY, f"could not save the history file: {saved.write_error}"
        )
    step = finish_summary(
        plan,
        SavedSummary(saved.file_path, None, outcome, saved.conversation_file),
        lambda view: config.threshold_tokens - counter.count_request(view, system_message, tools, profile),
    )
    tokens_after = next_request_tokens(messages, step.event, system_message, tools, config, counter)
    return ManualCompressionResult(True, tokens_before, tokens_after, event=step.event)


def next_request_tokens(
    messages: Sequence[BaseMessage],
    event: SummarizationEvent,
    system_message: SystemMessage | None,
    tools: Sequence[Any],
    config: CompressionConfig,
    counter: TokenCounter | None = None,
) -> int:
    """The estimate of the next request the state with `event` implies (S19, S22).

    `[summary, *raw messages after the cutoff]` with the system prompt and tool schemas: the figure
    the next model call starts from and the status panel shows, not the L1 view this step read.
    """
    implied = effective_messages(messages, event)
    counter = counter if counter is not None else TokenCounter()
    return counter.count_request(implied.messages, system_message, tools, config.token_profile)
