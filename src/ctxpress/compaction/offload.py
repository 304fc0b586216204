"""S8, S11, S13: a large tool result is written in full to the workdir; the view keeps a preview.

The file name is the sanitised tool name plus a sha256 prefix of the content, so the same content
always lands at the same path and is written once. If the write fails the message stays as it was
and the failure is recorded: the view never claims "saved" without a file.
"""

from __future__ import annotations

import hashlib
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import ToolMessage

from ctxpress.compaction.content import content_text, with_text
from ctxpress.compaction.markers import offload_header, parse_offload_reference, safe_name
from ctxpress.compaction.result import CompactionFailure, OffloadedResult
from ctxpress.compaction.retrieval_preview import is_retrieval_tool, retrieval_preview
from ctxpress.compaction.text_preview import (
    GAP_MARKER_TOKENS,
    head_middle_tail_preview,
    smallest_preview_budget,
)
from ctxpress.containment import RULE_RETRIEVAL_PREVIEW, RULE_TEXT_PREVIEW, Degradation, contain
from ctxpress.tokens import estimate_tokens
from ctxpress.workdir import Workdir, WorkdirError, encode_text

LARGE_RESULTS_DIR = "outputs/large_tool_results"
HASH_PREFIX_HEX = 16
#: A genuine offload view is its header plus a preview within the limit, plus this slack (two gap
#: markers, which a tiny limit cannot hold, and rounding); a text that merely starts like a view
#: but is larger is compacted after all.
VIEW_SLACK_TOKENS = 2 * GAP_MARKER_TOKENS + 24
PREVIEW_LABEL = "\nPreview:\n"
#: Tokens of the "Preview:" line between header and preview.
PREVIEW_LABEL_TOKENS = 4


def sanitize_tool_name(tool_name: str) -> str:
    """A file-name-safe form of an untrusted tool name (ASCII letters, digits, `_`, `.`, `-`)."""
    return safe_name(unicodedata.normalize("NFKC", tool_name or ""))


def offload_path(tool_name: str, sha256_hex: str) -> str:
    return f"{LARGE_RESULTS_DIR}/{sanitize_tool_name(tool_name)}-{sha256_hex[:HASH_PREFIX_HEX]}.txt"


def short_error_text(exc: BaseException) -> str:
    """Type and first line of an error from a backend (its own message may carry a host path)."""
    return type(exc).__name__ + (f": {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else "")


def failure_reason(exc: BaseException) -> str:
    """What a failed workdir write records (S13): our own error's text, else its type only."""
    return str(exc) if isinstance(exc, WorkdirError) else short_error_text(exc)


def offloaded_view_text(
    tool_name: str, path: str, sha256_hex: str, chars: int, tokens: int, preview: str
) -> str:
    header = offload_header(tool_name, path, sha256_hex, chars, tokens)
    return f"{header}{PREVIEW_LABEL}{preview}" if preview else header


@dataclass(frozen=True)
class OffloadDecision:
    """A remembered decision for one piece of content: the replacement text and its file."""

    text: str
    path: str
    sha256: str
    chars: int
    tokens: int
    #: The rules that raised while the preview was built (their fallback is in `text`).
    degraded: tuple[Degradation, ...] = ()


_UNCHANGED = None


class CompactionCache:
    """Remembers per-content L1 decisions so a repeated pass over the same history does no I/O.

    Keyed on the content string itself (its hash is cached on the object, and equality
    short-circuits on identity), the tool name, the limit, the profile and the workdir. Bounded
    both in entries and in the characters of content it keeps alive.
    """

    def __init__(self, max_entries: int = 4096, max_chars: int = 64_000_000) -> None:
        self._entries: OrderedDict[tuple[Any, ...], OffloadDecision | None] = OrderedDict()
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> tuple[bool, OffloadDecision | None]:
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def put(self, key: tuple[Any, ...], value: OffloadDecision | None) -> None:
        text_chars = len(key[2])
        if text_chars > self._max_chars:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = value
            self._chars += text_chars
            while len(self._entries) > self._max_entries or self._chars > self._max_chars:
                old_key, _ = self._entries.popitem(last=False)
                self._chars -= len(old_key[2])

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._entries)


def workdir_cache_key(workdir: Workdir) -> Any:
    # A backend names itself stably with `cache_key`; otherwise the object itself is the key
    # (holding it keeps its id from being reused by another workdir).
    return getattr(workdir, "cache_key", None) or workdir


def build_preview(
    tool_name: str,
    text: str,
    budget: int,
    profile: str,
    total_tokens: int,
    degraded: list[Degradation] | None = None,
) -> str:
    """S9 for retrieval tools (falling back to S10 on unexpected JSON, or when S9 raises), S10 for
    everything else (falling back to a plain cut of head and tail when it raises)."""

    def generic() -> str:
        return contain(
            RULE_TEXT_PREVIEW,
            lambda: head_middle_tail_preview(text, budget, profile, total_tokens),
            lambda: plain_cut(text, budget),
            degraded,
        )

    if is_retrieval_tool(tool_name):
        structured = contain(
            RULE_RETRIEVAL_PREVIEW, lambda: retrieval_preview(text, budget, profile), lambda: None, degraded
        )
        if structured is not None:
            return structured
    return generic()


def plain_cut(text: str, budget: int) -> str:
    """The last resort preview: head and tail by characters, a token each at most."""
    half = max(0, budget // 2 - 8)
    if len(text) <= 2 * half:
        return text
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters left out …]\n{text[len(text) - half :]}"


def preview_budget_for(limit: int, header_tokens: int, chars: int, tokens: int, profile: str) -> int:
    """The preview's share of the limit (never more than the limit itself).

    The whole view (header + preview) stays within the limit where that leaves a real preview;
    with a small limit the preview still gets half of it, or the least a preview needs when the
    limit holds that much (below it there is no preview: the header alone says where the text is).
    """
    budget = max(limit // 2, limit - header_tokens - PREVIEW_LABEL_TOKENS)
    return max(budget, min(limit, smallest_preview_budget(chars, tokens, profile)))


def is_compacted_view(text: str, tokens: int, limit: int, profile: str) -> bool:
    """A view this module produced: a real header, and no larger than its header plus a preview."""
    if parse_offload_reference(text) is None:
        return False
    header_end = text.find(PREVIEW_LABEL)
    header_tokens = estimate_tokens(text if header_end < 0 else text[:header_end], profile)
    return tokens <= max(limit, 0) + header_tokens + VIEW_SLACK_TOKENS


def _decide(tool_name: str, text: str, limit: int, profile: str) -> tuple[OffloadDecision | None, bytes]:
    tokens = estimate_tokens(text, profile)
    if tokens <= limit or is_compacted_view(text, tokens, limit, profile):
        return _UNCHANGED, b""
    data = encode_text(text)
    digest = hashlib.sha256(data).hexdigest()
    path = offload_path(tool_name, digest)
    header = offloaded_view_text(tool_name, path, digest, len(text), tokens, "")
    preview_budget = preview_budget_for(limit, estimate_tokens(header, profile), len(text), tokens, profile)
    degraded: list[Degradation] = []
    preview = build_preview(tool_name, text, preview_budget, profile, tokens, degraded)
    view_text = offloaded_view_text(tool_name, path, digest, len(text), tokens, preview)
    if estimate_tokens(view_text, profile) >= tokens:
        return _UNCHANGED, b""  # offloading would not make the request smaller
    return OffloadDecision(view_text, path, digest, len(text), tokens, tuple(degraded)), data


def store_once(workdir: Workdir, decision: OffloadDecision, data: bytes) -> bool:
    """Write the full text unless the same bytes are already there; True when written now (S11)."""
    # Same name means same content only if nobody edited the file since: check once.
    if (
        workdir.exists(decision.path)
        and hashlib.sha256(workdir.read_bytes(decision.path)).hexdigest() == decision.sha256
    ):
        return False
    workdir.write_bytes(decision.path, data)
    return True


def compact_tool_message(
    message: ToolMessage,
    tool_name: str,
    *,
    limit: int,
    profile: str,
    workdir: Workdir,
    cache: CompactionCache,
) -> tuple[ToolMessage, OffloadedResult | None, CompactionFailure | None]:
    """Offload one tool result if it is over the limit; the original message on failure (S13)."""
    text = content_text(message.content)
    key = (workdir_cache_key(workdir), tool_name, text, limit, profile)
    known, decision = cache.get(key)
    written_now = False
    if not known:
        decision, data = _decide(tool_name, text, limit, profile)
        if decision is not None:
            try:
                written_now = store_once(workdir, decision, data)
            except Exception as exc:  # any backend failure: keep the original (S13)
                failure = CompactionFailure(message.id, message.tool_call_id, tool_name, failure_reason(exc))
                return message, None, failure
        cache.put(key, decision)
    if decision is None:
        return message, None, None
    record = OffloadedResult(
        message_id=message.id,
        tool_call_id=message.tool_call_id,
        tool_name=tool_name,
        path=decision.path,
        sha256=decision.sha256,
        chars=decision.chars,
        approx_tokens=decision.tokens,
        written_now=written_now,
        degraded=decision.degraded,
    )
    new_message = message.model_copy(update={"content": with_text(message.content, decision.text)})
    return new_message, record, None
