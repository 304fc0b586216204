"""S7 generalised: an over-budget argument of any tool call is saved in the workdir (like S8).

`write_file` / `edit_file` arguments are only cut to a hint (the call itself wrote them, see
`ctxpress.compaction.arguments`). Any other tool's argument — a pasted document sent to a search
tool, a long script sent to a code runner — has no copy anywhere else, so its full text is written
to `outputs/large_tool_arguments/` and the view keeps a header naming that file plus a
head/middle/tail preview within `summary_tool_result_token_limit`. Without this, one huge
argument keeps every later request over the threshold until the summary reaches it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ctxpress.compaction.markers import argument_offload_header, offloaded_argument_path, safe_name
from ctxpress.compaction.offload import (
    PREVIEW_LABEL,
    VIEW_SLACK_TOKENS,
    CompactionCache,
    OffloadDecision,
    preview_budget_for,
    sanitize_tool_name,
    store_once,
    workdir_cache_key,
)
from ctxpress.compaction.text_preview import head_middle_tail_preview
from ctxpress.tokens import estimate_tokens
from ctxpress.workdir import Workdir, encode_text

LARGE_ARGUMENTS_DIR = "outputs/large_tool_arguments"
#: Arguments up to this many characters always stay whole (S7's per-argument limit).
ARGUMENT_CHAR_LIMIT = 2000
_HASH_PREFIX_HEX = 16


@dataclass(frozen=True)
class OffloadedArgument:
    """The replacement of one argument: the view text and the file holding the full value."""

    text: str
    path: str
    chars: int
    written_now: bool


def argument_text(value: Any) -> str:
    """The argument as the model wrote it: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _short_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= ARGUMENT_CHAR_LIMIT
    return value is None or isinstance(value, int | float | bool)


def argument_file_path(tool_name: str, argument: str, sha256_hex: str) -> str:
    tool = sanitize_tool_name(tool_name)
    return (
        f"{LARGE_ARGUMENTS_DIR}/{tool}-{safe_name(argument, 'argument')}-{sha256_hex[:_HASH_PREFIX_HEX]}.txt"
    )


def _already_a_view(text: str, tokens: int, limit: int, profile: str) -> bool:
    if offloaded_argument_path(text) is None:
        return False
    header_end = text.find(PREVIEW_LABEL)
    header_tokens = estimate_tokens(text if header_end < 0 else text[:header_end], profile)
    return tokens <= max(limit, 0) + header_tokens + VIEW_SLACK_TOKENS


def _decide(
    tool_name: str, argument: str, text: str, limit: int, profile: str
) -> tuple[OffloadDecision | None, bytes]:
    if len(text) <= ARGUMENT_CHAR_LIMIT:
        return None, b""
    tokens = estimate_tokens(text, profile)
    if tokens <= limit or _already_a_view(text, tokens, limit, profile):
        return None, b""
    data = encode_text(text)
    digest = hashlib.sha256(data).hexdigest()
    path = argument_file_path(tool_name, argument, digest)
    header = argument_offload_header(tool_name, argument, path, digest, len(text), tokens)
    budget = preview_budget_for(limit, estimate_tokens(header, profile), len(text), tokens, profile)
    preview = head_middle_tail_preview(text, budget, profile, tokens)
    view = f"{header}{PREVIEW_LABEL}{preview}" if preview else header
    if estimate_tokens(view, profile) >= tokens:
        return None, b""  # the view would not be smaller than the argument
    return OffloadDecision(view, path, digest, len(text), tokens), data


@dataclass(frozen=True)
class ArgumentOffloader:
    """Saves over-budget arguments in `workdir`, remembering each decision in `cache`."""

    workdir: Workdir
    limit: int
    profile: str
    cache: CompactionCache

    def offload(self, tool_name: str, argument: str, value: Any) -> OffloadedArgument | None:
        """The replacement of `value`, or None when it stays; a failed write raises (S13)."""
        if _short_scalar(value):
            return None  # the common case, decided without serialising or caching anything
        text = argument_text(value)
        if len(text) <= ARGUMENT_CHAR_LIMIT:
            return None
        key = (
            workdir_cache_key(self.workdir),
            f"argument:{tool_name}.{argument}",
            text,
            self.limit,
            self.profile,
        )
        known, decision = self.cache.get(key)
        written_now = False
        if not known:
            decision, data = _decide(tool_name, argument, text, self.limit, self.profile)
            if decision is not None:
                written_now = store_once(self.workdir, decision, data)
            self.cache.put(key, decision)
        if decision is None:
            return None
        return OffloadedArgument(decision.text, decision.path, decision.chars, written_now)
