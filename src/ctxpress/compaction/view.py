"""`compact_view`: L1 deterministic compaction as a pure function over a message list (S2, S7–S13).

S7 covers the arguments of every tool call (see `ctxpress.compaction.arguments`).

The input list and its messages are never mutated; the result holds new message objects where
something changed (ids, `tool_call_id`, `name`, `status` and `artifact` preserved) and the same
objects elsewhere, so tool-call pairs stay valid and message count and order never change.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ctxpress.compaction.argument_offload import ArgumentOffloader
from ctxpress.compaction.arguments import cut_long_arguments
from ctxpress.compaction.offload import CompactionCache, compact_tool_message
from ctxpress.compaction.result import (
    CompactionFailure,
    CompactionResult,
    OffloadedResult,
    TruncatedArgument,
)
from ctxpress.config import CompressionConfig
from ctxpress.containment import RULE_ARGUMENTS, RULE_TOOL_RESULT, constant, contain
from ctxpress.workdir import Workdir

ArgumentsOutcome = tuple[AIMessage, list[TruncatedArgument], list[CompactionFailure]]
ToolResultOutcome = tuple[ToolMessage, OffloadedResult | None, CompactionFailure | None]


def tool_names_by_call_id(messages: Sequence[BaseMessage]) -> dict[str, str]:
    names: dict[str, str] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    names[call["id"]] = call["name"]  # type: ignore[index]
    return names


def _tool_name(message: ToolMessage, names: dict[str, str]) -> str:
    return message.name or names.get(message.tool_call_id, "") or "tool"


def compact_view(
    messages: Sequence[BaseMessage],
    config: CompressionConfig,
    workdir: Workdir,
    *,
    cache: CompactionCache | None = None,
) -> CompactionResult:
    """Build the L1 view of `messages` and a record of what was done.

    `cache` remembers the decisions per content, so that a repeated pass over the same history does
    no I/O; without one, this call decides everything afresh (the middleware owns a cache).
    """
    cache = CompactionCache() if cache is None else cache
    profile = config.token_profile
    names = tool_names_by_call_id(messages)
    result = CompactionResult(messages=[], original=list(messages), profile=profile)
    offloader = ArgumentOffloader(workdir, config.summary_tool_result_token_limit, profile, cache)
    for message in messages:
        # A rule that raises on one message leaves that message as it was (containment.py).
        new_message: BaseMessage = message
        if isinstance(message, AIMessage) and (message.tool_calls or message.additional_kwargs):
            unchanged_call: ArgumentsOutcome = (message, [], [])
            new_message, truncated, failures = contain(
                RULE_ARGUMENTS,
                partial(cut_long_arguments, message, offloader),
                constant(unchanged_call),
                result.degraded,
            )
            result.truncated_arguments.extend(truncated)
            result.failures.extend(failures)
        elif isinstance(message, ToolMessage):
            unchanged_result: ToolResultOutcome = (message, None, None)
            rule = partial(
                compact_tool_message,
                message,
                _tool_name(message, names),
                limit=config.summary_tool_result_token_limit,
                profile=profile,
                workdir=workdir,
                cache=cache,
            )
            new_message, offloaded, failure = contain(
                RULE_TOOL_RESULT, rule, constant(unchanged_result), result.degraded
            )
            if offloaded is not None:
                result.offloaded.append(offloaded)
                result.degraded.extend(offloaded.degraded)
            if failure is not None:
                result.failures.append(failure)
        result.messages.append(new_message)
    return result
