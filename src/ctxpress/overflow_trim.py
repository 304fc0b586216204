"""S30 "overflow tail trimming": when even `[summary, *kept]` overflows the model, the kept tool
results are offloaded with smaller and smaller previews (`trim_budgets`), down to none.

The replacements keep their message ids, so returning them as a state `messages` update replaces
the checkpoint's copies and the checkpoint matches what the model saw. Their full text is in the
workdir first (S13: a result whose file cannot be written is not trimmed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.messages import BaseMessage, ToolMessage

from ctxpress.compaction.content import content_text
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.compaction.offload import CompactionCache, compact_tool_message
from ctxpress.compaction.view import tool_names_by_call_id
from ctxpress.config import CompressionConfig
from ctxpress.graph_run import tool_result_key
from ctxpress.tokens import estimate_tokens
from ctxpress.workdir import Workdir

#: Preview budget of a trimmed result: a quarter of the normal limit, at least a few lines; then the
#: header alone (a budget of 0: the path and hash, no preview).
TRIM_SHARE = 4
MIN_TRIM_PREVIEW_TOKENS = 16


def trim_budget(config: CompressionConfig) -> int:
    limit = config.summary_tool_result_token_limit
    return min(limit, max(MIN_TRIM_PREVIEW_TOKENS, limit // TRIM_SHARE))


def trim_budgets(config: CompressionConfig) -> list[int]:
    """The preview budgets tried in turn after an overflow, largest first."""
    return sorted({trim_budget(config), MIN_TRIM_PREVIEW_TOKENS, 0}, reverse=True)


def trim_kept_tool_results(
    view: Sequence[BaseMessage],
    originals: Mapping[str, ToolMessage],
    config: CompressionConfig,
    workdir: Workdir,
    cache: CompactionCache | None = None,
    *,
    budget: int | None = None,
) -> tuple[list[BaseMessage], list[BaseMessage]]:
    """The view with tool results over `budget` trimmed to it (by default `trim_budget`), and the
    trimmed messages for the state update.

    `originals` are the state's tool results by `graph_run.tool_result_key` (their message id,
    else the call id: messages of a plain list have no ids, and call ids may repeat).
    """
    budget = trim_budget(config) if budget is None else budget
    cache = cache if cache is not None else CompactionCache()
    names = tool_names_by_call_id(view)
    new_view: list[BaseMessage] = []
    replacements: list[BaseMessage] = []
    for message in view:
        original = originals.get(tool_result_key(message)) if isinstance(message, ToolMessage) else None
        if not isinstance(original, ToolMessage):
            new_view.append(message)
            continue
        text = content_text(original.content)
        if parse_offload_reference(text) or estimate_tokens(text, config.token_profile) <= budget:
            new_view.append(message)  # small enough, or trimmed by an earlier overflow already
            continue
        trimmed, offloaded, _failure = compact_tool_message(
            original,
            original.name or names.get(original.tool_call_id, "tool"),
            limit=budget,
            profile=config.token_profile,
            workdir=workdir,
            cache=cache,
        )
        if offloaded is None:  # S13: not stored, so not trimmed
            new_view.append(message)
            continue
        new_view.append(trimmed)
        replacements.append(trimmed)
    return new_view, replacements
